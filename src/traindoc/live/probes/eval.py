"""Evaluation passes: forward passes of a model under ``no_grad`` / ``inference_mode`` after an
optimizer step, until training resumes (the next step's backward closes the round).

``torch.no_grad`` and ``torch.inference_mode`` are patched (``__enter__``/``__exit__``), so the
training step itself pays nothing: a region entered before the round's optimizer step (a
teacher's forward, ``clip_grad_norm_``'s own no_grad) is not followed. A region entered after
the step installs global forward hooks until its first root forward (a module with parameters
called at depth 0) has been looked at, then removes them: the rest of the evaluation runs at
full speed. At that first forward of each phase traindoc records the modules in train mode
that change behaviour with the mode (BatchNorm, Dropout, stochastic depth), the BatchNorm
running statistics of the evaluated model and of the training model it mirrors (an EMA copy),
and on the first phases, when the model is in eval mode, re-runs the forward once on the same
input to see whether it is deterministic. The re-run saves and restores the CPU, CUDA, Python
and NumPy RNG states and the model's buffers, so the user's run continues bit-identically; a
``TorchFunctionMode`` of its own, up for the re-run only, records which random ops the forward
calls and whether a ``torch.distributions`` distribution called them (a policy drawing its
action: its passes are rollouts, different on purpose).
"""

from __future__ import annotations

import functools
import math
import sys
import time
from typing import Any, Iterable

import torch
import torch.nn as nn
from torch.nn.modules import module as _module

from traindoc.events import BatchNormState, EvalPass, Event
from traindoc.live import measure
from traindoc.live.probes._ops import is_compiled_module
from traindoc.live.probes._patch import Patcher, is_traced
from traindoc.live.probes.base import Probe
from traindoc.live.probes.eval_parts import (
    Pass, Phase, QuietLines, RandomDraws, find_twin, in_update_bn, is_dropout_entry, mode_dependent,
    ours, rerun_safe, restore_rng, save_rng, unwrap,
)
from traindoc.live.probes.inference import InferenceRegions
from traindoc.live.objects import ObjectMap, user_site
from traindoc.live.session import Session

_RERUNS = 2  # evaluation phases whose first forward is re-run (determinism check)
_MODE_TOLERANCE = 1e-4  # relative change of a train-mode output when re-run in eval mode
_MC_PASSES = 3  # forwards of one input tensor in one evaluation that make it MC dropout
_BN_PHASES = 5  # phases whose BatchNorm statistics are all read; then every 10th
_FINGERPRINTS = 256  # submodule outputs fingerprinted during a re-run


class EvalProbes(Probe):
    name = "eval"
    signals = ("eval", "bn", "inference_forward")

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._hooks: list[Any] = []
        self._depth = 0  # nested tracked no_grad regions
        self._quiet = QuietLines()  # lines whose regions the op-level mode can skip
        self._region_t0 = 0.0
        self._fdepth = 0  # module call depth while hooked
        self._phase: Phase | None = None
        self._reruns = 0
        self._versus = 0  # train-mode evaluations re-run in eval mode
        self._rerun_pass: Pass | None = None
        self._evaluated = ObjectMap()  # model -> evaluation phases it was looked at in
        self._samplers = ObjectMap()  # models whose re-run drew from a distribution: they act
        self._busy = False  # inside our own re-run
        self._prints: list[tuple[str, torch.Tensor]] | None = None
        self._bn_prev: dict[tuple[str, str], torch.Tensor] = {}
        self._mnames: dict[int, str] = {}
        self._skipped = 0.0  # seconds spent in our re-runs (not the user's evaluation)
        # A pass with only Dropout in train mode: [it, its module, its first input, passes on that
        # input], kept while the model's next root forwards of the phase take the same input:
        # MC dropout (the same batch _MC_PASSES times) or not (another batch)
        self._mc: list[Any] | None = None
        self._first_input: Any = None
        self._inference = InferenceRegions(session)  # inference_mode regions of training steps

    # ---- install / uninstall -----------------------------------------------------------------
    def install(self) -> None:
        for cls in (torch.no_grad, torch.inference_mode):
            # Always on: switching a class's methods at every step would use up its type
            # version tags (CPython 3.13 stops caching lookups on it after 1000 changes).
            self._patch(cls, "__enter__", self._wrap_enter)
            self._patch(cls, "__exit__", self._wrap_exit)

    def uninstall(self) -> None:
        self._set_hooks(False)
        self._patcher.ops.release("eval")
        self.s.clock.unlisten_round(self._on_round)
        self._guard("eval", self._close_phase)
        self._depth = 0

    # ---- regions -----------------------------------------------------------------------------
    def _wrap_enter(self, orig: Any) -> Any:
        probes, session = self, self.s

        @functools.wraps(orig)
        def __enter__(ctx: Any) -> Any:
            out = orig(ctx)
            # Only regions after the round's optimizer step can be an evaluation (and not
            # traindoc's own: the session measures under no_grad after the step).
            if probes._depth or (session.clock.round_done and not probes._busy and not ours(sys._getframe(1))):
                probes._guard("eval", probes._enter, ctx, sys._getframe(1))
            if session.clock.measuring and type(ctx) is torch.inference_mode and not probes._busy:
                probes._guard("eval", probes._inference.enter, ctx)
            return out

        return __enter__

    def _wrap_exit(self, orig: Any) -> Any:
        probes = self

        @functools.wraps(orig)
        def __exit__(ctx: Any, *args: Any) -> Any:
            out = orig(ctx, *args)
            if probes._depth and ctx.__dict__.get("_traindoc_region"):  # a region we track is open
                probes._guard("eval", probes._exit, ctx)
            if "_traindoc_inference" in ctx.__dict__:
                probes._guard("eval", probes._inference.exit, ctx)
            return out

        return __exit__

    def _enter(self, ctx: Any, frame: Any) -> None:
        if is_traced():
            return
        ctx.__dict__["_traindoc_region"] = True
        self._depth += 1
        self.s.clock.listen_round(self._on_round)
        if self._depth == 1:
            self._region_t0 = time.perf_counter()
            self._set_hooks(True)  # until the region's first root forward
            if self._quiet.enter(frame, self._patcher.ops.hits):
                self._patcher.ops.hold("eval")  # loss calls of the evaluation (eval_metrics)

    def _exit(self, ctx: Any) -> None:
        ctx.__dict__.pop("_traindoc_region", None)
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:
            self._set_hooks(False)
            if self._quiet.exit(self._patcher.ops.hits):
                self._patcher.ops.release("eval")
            if self._phase is not None:
                self._phase.last_exit = time.perf_counter()

    def _set_hooks(self, on: bool) -> None:
        if on and not self._hooks and not self.s.compiled:
            self._fdepth = 0
            self._hooks = [
                _module.register_module_forward_pre_hook(self._pre),
                _module.register_module_forward_hook(self._post, with_kwargs=True),
            ]
        elif not on and self._hooks:
            for h in self._hooks:
                h.remove()
            self._hooks = []

    # ---- forward hooks (only inside an evaluation region, until its first root forward) ------
    def _pre(self, module: Any, args: Any) -> None:
        if is_traced():
            return
        if self.name in self.s.failed:  # disabled after an error of ours: stop hooking
            self._set_hooks(False)
            return
        if self._fdepth == 0 and is_compiled_module(module):  # before dynamo sees our hooks
            self._set_hooks(False)
            self.s.mark_compiled()
            return
        depth = self._fdepth
        self._fdepth += 1
        if self._busy:
            return
        if depth == 0 and self._mc is not None and self._mc[1] is module and not torch.is_grad_enabled():
            self._guard("eval", self._same_batch_again, args)
        if (depth == 0 and not torch.is_grad_enabled() and next(module.parameters(), None) is not None
                and (self._phase is None or id(module) not in self._phase.seen)):
            self._first_input = args[0] if args else None
            self._guard("eval", self._look, module)
            self._first_input = None

    def _post(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if is_traced():
            return
        self._fdepth = max(0, self._fdepth - 1)
        if self._prints is not None and self._fdepth > 0 and len(self._prints) < 2 * _FINGERPRINTS:
            self._guard("eval", self._fingerprint, module, output)
            return
        if self._fdepth == 0 and not self._busy:
            if self._rerun_pass is not None:
                self._guard("eval", self._rerun, module, args, kwargs, output)
                self._rerun_pass = None
            self._prints = None
            if self._mc is None or self._mc[1] is not module:
                self._set_hooks(False)  # the rest of this region runs without hooks

    # ---- one evaluation phase ----------------------------------------------------------------
    def _look(self, module: nn.Module) -> None:
        """The first root forward of ``module`` in this evaluation phase."""
        if in_update_bn():
            return  # re-estimating BatchNorm statistics on purpose (swa_utils.update_bn)
        s = self.s
        if self._phase is None:
            self._phase = Phase(s.clock.step, self._region_t0)
        ph = self._phase
        ph.seen.add(id(module))
        one = Pass()
        ph.passes.append(one)
        inner = unwrap(module)
        one.model = type(inner).__name__
        one.training = bool(inner.training)
        one.sampled = inner in self._samplers
        first = self._first_input
        if isinstance(first, torch.Tensor):
            one.rows = int(first.shape[0]) if first.ndim > 1 else 1
        one.where = user_site(4)
        held = s.held_ids()
        owned = any(id(p) in held for p in inner.parameters())
        # Not trained: a copy of a trained model (an EMA, a target network) or a model of its own
        one.role = "model" if owned else "copy" if s.model.is_trained(inner) else "other"
        modes = [(n, m) for n, m in inner.named_modules() if mode_dependent(m)]
        one.mode_modules = len(modes)
        one.train_modules = tuple(f"{n or type(inner).__name__} ({type(m).__name__})"
                                  for n, m in modes if m.training)
        if one.train_modules and all(is_dropout_entry(m) for m in one.train_modules) \
                and isinstance(self._first_input, torch.Tensor):
            self._mc = [one, module, self._first_input, 1]  # hooks stay up for its next root forwards
        seen = self._evaluated.get(inner, 0) + 1
        self._evaluated[inner] = seen
        if seen <= _BN_PHASES or seen % 10 == 0:
            self._batchnorm(inner, owned, held, ph)
        eval_mode = not module.training and all(not m.training for m in inner.modules())
        # Two budgets: train-mode rollouts (an RL policy) must not use up the determinism check's
        budget = self._reruns < _RERUNS if eval_mode else self._versus < _RERUNS
        if budget and not one.train_modules and (eval_mode or inner.training) and rerun_safe(module):
            if eval_mode:
                self._reruns += 1
            else:  # train mode, nothing mode-dependent in sight: functional dropout?
                one.versus_eval = save_rng()
                self._versus += 1
            self._rerun_pass = one
            self._prints = []
            self._mnames = {id(m): n for n, m in inner.named_modules()}

    def _same_batch_again(self, args: Any) -> None:
        """The second root forward of a model evaluated with Dropout in train mode: the same
        input tensor again is Monte Carlo dropout (stochastic passes averaged on purpose), and
        its Dropout modules are no mistake once it comes _MC_PASSES times (twice may be two
        metrics computed from two forwards); BatchNorm in train mode still is."""
        mc = self._mc
        if mc is None or not args or args[0] is not mc[2]:
            self._mc = None  # another batch: an ordinary evaluation
            return
        mc[3] += 1
        if mc[3] >= _MC_PASSES:  # not two calls for two metrics: passes to average
            self._mc = None
            mc[0].train_modules = tuple(m for m in mc[0].train_modules if not is_dropout_entry(m))

    def _fingerprint(self, module: Any, output: Any) -> None:
        outs = measure.first_float_tensors(output, limit=1)
        if not outs or self._prints is None:
            return
        x = outs[0].detach().float()
        name = self._mnames.get(id(module)) or "?"
        self._prints.append((f"{name} ({type(module).__name__})", torch.stack([x.sum(), x.abs().sum()])))

    def _rerun(self, module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        """Run the forward once more on the same input and keep the difference (on device)."""
        one = self._rerun_pass
        first = measure.first_float_tensors(output, limit=1)
        if one is None or not first:
            return
        prints1, self._prints = self._prints or [], []
        t0 = time.perf_counter()
        saved = save_rng()
        buffers = [(b, b._version, b.detach().clone()) for b in module.buffers()]
        modes: list[tuple[nn.Module, bool]] = []
        if one.versus_eval is not None:
            # The same forward in eval mode, from the RNG state the user's forward started
            # with: random ops that ignore the mode (sampling) give the same numbers again.
            restore_rng(one.versus_eval)
            one.versus_eval = None
            modes = [(m, m.training) for m in module.modules()]
            for m, _ in modes:
                m.training = False  # the attribute only: no user train() override runs
        self._busy = True
        draws = RandomDraws()
        try:
            with torch.no_grad(), draws:
                out2 = module(*args, **(kwargs or {}))
        finally:
            self._busy = False
            for m, mode in modes:
                m.training = mode
            with torch.no_grad():
                for b, version, copy in buffers:
                    if b._version != version:
                        b.copy_(copy)  # our re-run changed a buffer: put the user's value back
            restore_rng(saved)
            prints2, self._prints = self._prints or [], None
            self._skipped += time.perf_counter() - t0
        if draws.sampled and not draws.other:  # its randomness is a draw it asks for, on purpose
            one.sampled = True
            self._samplers[unwrap(module)] = True
        second = measure.first_float_tensors(out2, limit=1)
        if not second or second[0].shape != first[0].shape:
            return
        with torch.no_grad():
            a, b = first[0].detach().float(), second[0].detach().float()
            parts = [(a - b).abs().max().reshape(1), a.abs().max().reshape(1)]
            if len(prints1) == len(prints2) and prints1:
                p1 = torch.stack([t for _, t in prints1])
                p2 = torch.stack([t for _, t in prints2])
                tol = 1e-4 * p1[:, 1].abs() + 1e-6
                parts.append(((p1 - p2).abs().max(dim=1).values > tol).float())
                one.names = [n for n, _ in prints1]
        one.rerun = torch.cat([t.to(parts[0].device) for t in parts])

    def _batchnorm(self, inner: nn.Module, owned: bool, held: set[int], ph: Phase) -> None:
        """BatchNorm running statistics of the evaluated model (and of the training model an
        EMA copy mirrors), each model once per phase."""
        bns = [(n, m) for n, m in inner.named_modules()
               if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None]
        if not bns or id(inner) in ph.bn_seen:
            return
        ph.bn_seen.add(id(inner))
        pairs: list[tuple[str, list[tuple[str, Any]]]] = [("model" if owned else "ema", bns)]
        if not owned:
            twin = find_twin(self.s, inner, {n for n, _ in bns}, held)
            if twin is not None and id(twin) not in ph.bn_seen:
                ph.bn_seen.add(id(twin))
                pairs.append(("model", [(n, m) for n, m in twin.named_modules()
                                        if isinstance(m, nn.modules.batchnorm._BatchNorm)
                                        and m.running_mean is not None]))
        step = self.s.clock.step
        rows: list[tuple[str, str, int, bool, bool]] = []
        parts: list[torch.Tensor] = []
        with torch.no_grad():
            for role, mods in pairs:
                for name, m in mods:
                    mean, var = m.running_mean, m.running_var
                    sample = measure.strided(mean).clone()
                    prev = self._bn_prev.get((role, name))
                    changed = (prev != sample).any() if prev is not None and prev.shape == sample.shape \
                        else torch.zeros((), dtype=torch.bool, device=mean.device)
                    self._bn_prev[(role, name)] = sample
                    affine = m.weight is not None and m.bias is not None
                    at_init_affine = ((m.weight == 1).all() & (m.bias == 0).all()) if affine \
                        else torch.zeros((), dtype=torch.bool, device=mean.device)
                    nbt = m.num_batches_tracked.float() if m.num_batches_tracked is not None \
                        else torch.full((), -1.0, device=mean.device)
                    parts.append(torch.stack([
                        (mean == 0).all().float(), (var == 1).all().float(), nbt.to(mean.device),
                        at_init_affine.float().to(mean.device), changed.float().to(mean.device),
                    ]))
                    rows.append((role, name or type(m).__name__, mean.numel(), affine, prev is not None))
            dev = parts[0].device
            packed = torch.cat([t.to(dev) for t in parts])

        def decode(vals: list[float]) -> Iterable[Event]:
            for i, (role, name, channels, affine, compared) in enumerate(rows):
                m0, v1, nbt, aff, changed = vals[5 * i:5 * i + 5]
                yield BatchNormState(
                    step=step, module=name, channels=channels, mean_at_init=bool(m0),
                    var_at_init=bool(v1), num_batches_tracked=int(nbt) if nbt >= 0 else None,
                    affine_at_init=bool(aff) if affine else None,
                    changed=bool(changed) if compared else None, role=role,
                )

        self.s.defer(packed, decode)

    def _on_round(self, step: int) -> None:
        """The round after an evaluation region was entered ended (listened to from then on
        only: most rounds have no evaluation)."""
        self.s.clock.unlisten_round(self._on_round)
        if self._depth:  # a region left open (entered by hand, never exited): stop following it
            self._depth = 0
            self._set_hooks(False)
        if self._phase is not None:
            self._guard("eval", self._close_phase)

    def _close_phase(self) -> None:
        ph, self._phase = self._phase, None
        self._mc = None
        if ph is None or not ph.passes:
            return
        end = ph.last_exit if ph.last_exit is not None else time.perf_counter()
        duration = max(0.0, end - ph.t0 - self._skipped)
        self._skipped = 0.0
        elapsed = self.s.elapsed(end)
        passes = ph.passes

        def events(reruns: list[tuple[float, float, str]]) -> Iterable[Event]:
            for i, (one, (rel, diff, first)) in enumerate(zip(passes, reruns)):
                yield EvalPass(step=ph.step, model=one.model, role=one.role,
                               duration_s=duration if i == 0 else 0.0, elapsed_s=elapsed,
                               train_modules=one.train_modules, mode_modules=one.mode_modules,
                               rerun=rel, rerun_abs=diff, first_diff=first, where=one.where, index=i,
                               training=one.training, sampled=one.sampled, rows=one.rows)

        tensors = [one.rerun for one in passes if one.rerun is not None]
        if not tensors:
            for e in events([(math.nan, math.nan, "")] * len(passes)):
                self.s.emit(e)
            return
        sizes = [0 if one.rerun is None else one.rerun.numel() for one in passes]
        packed = torch.cat([t.to(tensors[0].device) for t in tensors])

        def decode(vals: list[float]) -> Iterable[Event]:
            reruns, pos = [], 0
            for one, n in zip(passes, sizes):
                if not n:
                    reruns.append((math.nan, math.nan, ""))
                    continue
                diff, scale, flags = vals[pos], vals[pos + 1], vals[pos + 2:pos + n]
                pos += n
                first = next((one.names[i] for i, f in enumerate(flags) if f and i < len(one.names)), "")
                rel = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
                if one.training:  # compared with eval mode, not with itself: no determinism check
                    changed = rel > _MODE_TOLERANCE
                    reruns.append((math.nan, diff, (first or "output") if changed else ""))
                    continue
                reruns.append((rel, diff, first))
            yield from events(reruns)

        self.s.defer(packed, decode)
