"""A live observation session: step bookkeeping, sampling, and the one batched transfer.

The probes (``live/probes/``) call the ``on_*`` methods from torch's hooks. Tensors measured
during a step stay on their device in ``_pending``; at the end of each *sampled* step they are
concatenated and read back with one ``.tolist()`` per device (the only GPU sync traindoc adds),
decoded into events and fed to the engine.

Steps: ``step`` counts training steps (0-based). A step "round" holds at most one ``step()`` per
optimizer; the round closes at the next ``backward()`` after an optimizer stepped, when an
optimizer steps a second time (several optimizers, GANs, LBFGS closures all fit this rule), or
when the gradients are cleared after a backward without any step (the script skipped the step).
Each round ends in the event stream with its loss, its gradient norm and one ``StepEnd`` per
optimizer saying how that optimizer's step ended (stepped, skipped by a GradScaler, skipped by
the script, no gradients), always after the round's own measurements: detectors judge a step
knowing its outcome.

The step bookkeeping never runs inside a probe that can be disabled: a measurement that fails
(an unexpected dtype, a tensor subclass) disables that measurement only, and the report names
the detectors it left blind.
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from traindoc import config, detectors
from traindoc.engine import Engine, Report
from traindoc.events import (
    NO_GRADS, SKIPPED_BY_SCALER, SKIPPED_BY_SCRIPT, STEPPED, Activation, Backward, Batch, Cast,
    Classification, Clip, Event, Optimizer, ParamGroup, ParamStats, Phase, RunEnd, RunStart,
    Scalar, StepBegin, StepEnd,
)
from traindoc.findings import Finding
from traindoc.live import measure
from traindoc.live.objects import ObjectMap, frame_modules, largest_container, user_site

Decoder = Callable[[list[float]], Iterable[Event]]


@dataclass(frozen=True)
class Level:
    """The one cost dial. Steps < ``dense`` are all sampled (most silent failures show at steps
    0-2), then every ``every``-th step. ``activations``: forward hooks on sampled steps."""

    dense: int
    every: int
    activations: bool

    def sampled(self, step: int) -> bool:
        return step < self.dense or step % self.every == 0


LEVELS: dict[str, Level] = {
    "cheap": Level(dense=4, every=100, activations=False),
    "standard": Level(dense=16, every=25, activations=True),
    "thorough": Level(dense=64, every=1, activations=True),
}

RELU_WINDOW = 8  # sampled batches per dead-ReLU window

# What each probe measures: when one is disabled, the detectors reading these signals are blind.
PROBE_SIGNALS: dict[str, tuple[str, ...]] = {
    "params": ("params", "grad_norm", "optimizer"),
    "backward": ("backward", "loss"),
    "clip": ("clip", "grad_norm"),
    "forward": ("activations",),
    "dataloader": ("batch",),
    "cross_entropy": ("classification",),
    "cast": ("cast",),
    "accumulation": ("accumulation",),
    "scheduler": ("scheduler", "lr"),
    "lr": ("lr",),
    "loop": ("scheduler", "lr"),
    "amp": ("amp", "autocast"),
    "checkpoints": ("save", "load", "checkpoint", "train_state"),
    "eval": ("eval", "bn"),
    "data": ("data_wait",),
    "routers": ("expert_gini", "expert_entropy"),
    "loss_terms": ("loss_terms",),
}


class _RoundEnd:
    """A marker in the pending list: the round ``step`` ended; emit its loss, gradient norm
    and outcomes once the values before it are decoded."""

    __slots__ = ("step", "outcomes")

    def __init__(self, step: int, outcomes: list[tuple[int, str, int]]) -> None:
        self.step = step
        self.outcomes = outcomes

class Session:
    def __init__(
        self,
        *,
        level: str = "standard",
        select: Iterable[str] | None = None,
        ignore: Iterable[str] = (),
        settings: config.Settings | None = None,
        sink: Callable[[Event], None] | None = None,
        announce: Callable[[Finding], None] | None = None,
    ) -> None:
        settings = settings or config.Settings()
        self.level_name = level
        self.level = LEVELS[level]
        self.engine = Engine(
            detectors.build(select=select, ignore=ignore, config=settings.detectors),
            on_finding=announce, ignore=ignore,
        )
        self._sink = sink
        self.step = 0
        self.round_done = False
        self.sampled = self.level.sampled(0)
        self.next_sampled = self.sampled
        self._stepped: set[int] = set()
        self._micro = 0
        self._outcomes: list[tuple[int, str, int]] = []  # (optimizer, outcome, taken) this round
        self._taken: dict[int, int] = {}  # optimizer index -> steps that took effect
        self._cleared = False  # gradients cleared since this round's last backward
        self._trained = False  # a backward or an optimizer step was seen
        self._phase = 0
        self._loss_sum: dict[int, float] = {}  # step -> sum of its decoded backward values
        # In stream order: measurements to read back, round ends, and events that must not
        # overtake the measurements before them.
        self._pending: list[tuple[torch.Tensor, Decoder] | _RoundEnd | Event] = []
        self._started = time.time()
        self._t0 = time.perf_counter()
        # Optimizers and parameters (weak: traindoc must not keep the user's objects alive).
        self._optimizers = ObjectMap()  # optimizer -> index
        self._announced = ObjectMap()
        self._pnames = ObjectMap()  # parameter -> name
        self._init = ObjectMap()  # parameter -> its sampled elements when first seen
        self._snap = ObjectMap()  # parameter -> StepSnapshot before this step
        self._roots = ObjectMap()  # model -> True
        self._mnames = ObjectMap()  # module -> name
        self._relu = ObjectMap()  # ReLU module -> (name, type, ever-active units, batches)
        self._nan_flags: list[tuple[str, str, torch.Tensor]] = []
        self._clipped: set[int] = set()
        self._grad_sq: dict[int, float] = {}
        self.failed: dict[str, str] = {}
        self._failed_at: dict[str, int] = {}
        self.on_sampling_change: Callable[[bool], None] | None = None
        # Loss tensors scaled by an AMP GradScaler (id -> scale tensor), set by the AMP probe,
        # so the loss signal is the user's loss, not loss * scale.
        self.loss_scales: dict[int, torch.Tensor] = {}
        # Set by the AMP probe while a clip call sees gradients still multiplied by a GradScaler's
        # scale (clipping before scaler.unscale_), so the clip's norm is reported unscaled.
        self.grad_scale: torch.Tensor | None = None
        # Called with the step that just ended (before the counter moves on).
        self.round_listeners: list[Callable[[int], None]] = []
        # Called with (module, output) for every module output of a sampled training forward.
        self.output_listeners: list[Callable[[Any, Any], None]] = []
        # Called with every event emitted (the guard watches the stream through this).
        self.event_listeners: list[Callable[[Event], None]] = []

    # ---- bookkeeping -------------------------------------------------------------------------
    @property
    def current_step(self) -> int:
        """The step that work happening now belongs to (the next one once an optimizer stepped)."""
        return self.step + 1 if self.round_done else self.step

    @property
    def measuring(self) -> bool:
        """Is the work happening now on a sampled step?"""
        return self.next_sampled if self.round_done else self.sampled

    @property
    def trained(self) -> bool:
        """Was any training seen (a backward or an optimizer step)?"""
        return self._trained

    def defer(self, tensor: torch.Tensor, decode: Decoder) -> None:
        """Keep ``tensor`` on its device until the next flush, then call ``decode`` with its
        values (a list of floats) to make events. Probes use this instead of ``.item()``."""
        self._pending.append((tensor, decode))

    def emit(self, event: Event) -> None:
        if self._sink is not None:
            self._sink(event)
        self.engine.feed(event)
        for listener in self.event_listeners:
            listener(event)

    def flush(self) -> None:
        """Read the pending device values now and emit their events (one sync per device).
        Only the opt-in guard calls this between sampled steps."""
        self._flush()

    def models(self) -> list[Any]:
        """The models seen training so far (roots of forward passes), still alive."""
        return [m for m, _ in self._roots.items()]

    def start(self, script: str, argv: list[str]) -> None:
        self.emit(RunStart(
            source="live", script=script, argv=tuple(argv), python=platform.python_version(),
            torch=torch.__version__, started=self._started,
            rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1)),
            level=self.level_name,
        ))
        self.emit(StepBegin(step=0))

    def finish(self, status: str = "ok", exit_code: int = 0) -> Report:
        if self._micro or self._outcomes:  # the last round's own events, then its end
            self._pending.append(_RoundEnd(self.step, self._round_outcomes()))
        self._flush()
        self.emit(RunEnd(steps=self.current_step, duration_s=time.perf_counter() - self._t0, status=status,
                         trained=self._trained, exit_code=exit_code,
                         optimizer_steps=sum(self._taken.values())))
        report = self.engine.finish()
        for probe, error in sorted(self.failed.items()):
            chosen = report.ran + [id_ for id_, _ in report.not_applicable]
            report.disabled.append((f"probe:{probe}", self._blind(probe, error, chosen)))
        return report

    def _blind(self, probe: str, error: str, chosen: list[str]) -> str:
        """The error, from which step, and the detectors the disabled probe left blind."""
        signals = set(PROBE_SIGNALS.get(probe, ()))
        blind = [cls.id for cls in detectors.DETECTORS if cls.id in chosen
                 and signals & (set(cls.needs) | set(getattr(cls, "uses", ())))]
        at = self._failed_at.get(probe, 0)
        tail = f"; blind from step {at} on: {', '.join(blind)}" if blind else ""
        return f"{error}{tail}"

    def fail(self, probe: str, exc: BaseException) -> None:
        """A probe raised: remember it once; the caller disables it. Never reaches the user."""
        if probe not in self.failed:
            self.failed[probe] = f"{type(exc).__name__}: {exc}"
            self._failed_at[probe] = self.current_step
            sys.stderr.write(f"traindoc: internal error in probe {probe!r}, disabled it: {exc}\n")

    def _round_outcomes(self) -> list[tuple[int, str, int]]:
        if self._outcomes:
            return self._outcomes
        return [(-1, SKIPPED_BY_SCRIPT, 0)]  # backward ran, no optimizer stepped

    def _close_round(self) -> None:
        self._pending.append(_RoundEnd(self.step, self._round_outcomes()))
        if self.sampled or len(self._pending) > 512:
            self._flush()
        for listener in self.round_listeners:
            listener(self.step)
        self.step += 1
        self.round_done = False
        self._stepped.clear()
        self._outcomes = []
        self._micro = 0
        self._cleared = False
        self.sampled = self.next_sampled
        self._pending.append(StepBegin(step=self.step))

    # ---- optimizers ---------------------------------------------------------------------------
    def on_optimizer_created(self, opt: Any) -> None:
        if opt not in self._optimizers:
            index = len(self._optimizers)
            self._optimizers[opt] = index
            if self._taken:  # another optimizer trained already: a new phase begins
                self._phase += 1
                self._pending.append(Phase(step=self.current_step, index=self._phase,
                                reason=f"a new optimizer ({type(opt).__name__}) after "
                                       f"{sum(self._taken.values())} optimizer steps"))

    def on_zero_grad(self) -> None:
        """The script cleared gradients (``optimizer.zero_grad()`` / ``model.zero_grad()``)."""
        if self._micro and not self.round_done:
            self._cleared = True

    def on_step_pre(self, opt: Any) -> None:
        """Bookkeeping first (never disabled), then the sampled measurement (may be)."""
        if self.round_done and id(opt) in self._stepped:
            self._close_round()
        self.on_optimizer_created(opt)
        if self.sampled and "params" not in self.failed:
            try:
                self._snapshot(opt)
            except Exception as exc:  # never let traindoc break the user's training
                self.fail("params", exc)

    def _snapshot(self, opt: Any) -> None:
        index = self._optimizers.get(opt)
        if opt not in self._announced:
            self._announced[opt] = True
            self._name_params(opt)
            self.emit(self._optimizer_event(opt, index))
        with torch.no_grad():
            params = [p for g in opt.param_groups for p in g["params"]]
            for p in params:
                if p not in self._init:
                    self._init[p] = measure.strided(p).clone()
                self._snap[p] = measure.StepSnapshot(p)

    def on_step_post(self, opt: Any) -> None:
        self._end_step(opt, _has_grads(opt))
        if self.sampled and opt in self._optimizers and "params" not in self.failed:
            try:
                self._measure_step(opt)
            except Exception as exc:  # never let traindoc break the user's training
                self.fail("params", exc)

    def _end_step(self, opt: Any, stepped: bool | None) -> None:
        """``opt``'s part of this round ended: it stepped (True), stepped with no gradient
        (False) or was skipped by a GradScaler (None)."""
        first = not self.round_done
        self._stepped.add(id(opt))
        self.round_done = True
        self._trained = True
        index = self._optimizers.get(opt, -1)
        if stepped:
            self._taken[index] = self._taken.get(index, 0) + 1
        outcome = STEPPED if stepped else NO_GRADS if stepped is False else SKIPPED_BY_SCALER
        self._outcomes.append((index, outcome, self._taken.get(index, 0)))
        if first:
            self._sample_next()

    def _sample_next(self) -> None:
        self.next_sampled = self.level.sampled(self.step + 1)
        if (self.on_sampling_change is not None and self.level.activations
                and self.next_sampled != self.sampled):  # forward hooks go on or off
            self.on_sampling_change(self.next_sampled)

    def on_step_skipped(self, opt: Any) -> None:
        """``opt.step()`` did not run: an AMP GradScaler found Inf/NaN gradients and skipped it.
        The step still ends, as in the user's loop (whose counter and scheduler move on), so the
        steps stay aligned; nothing is measured for it."""
        if self.round_done and id(opt) in self._stepped:
            self._close_round()
        self.on_optimizer_created(opt)
        self._end_step(opt, None)

    def _measure_step(self, opt: Any) -> None:
        index = self._optimizers.get(opt)
        step = self.step
        rows: list[tuple[str, str, int, bool, bool, int, float, bool]] = []
        tracked: list[torch.Tensor] = []
        grads: list[torch.Tensor] = []
        stats: list[torch.Tensor] = []
        with torch.no_grad():
            for gi, group in enumerate(opt.param_groups):
                lr = float(group.get("lr", 0.0))
                for p in group["params"]:
                    snap = self._snap.pop(p, None)
                    if snap is None:
                        continue
                    has_grad = p.grad is not None
                    if has_grad:
                        grads.append(p.grad)
                    stats.append(snap.after(p, self._init.get(p), measure.drive(opt, p)))
                    tracked.append(p.detach())
                    adam = measure.is_adam_family(opt, p)
                    rows.append((self._pname(p), str(p.dtype), p.numel(), p.requires_grad,
                                 has_grad, gi, lr, adam))
            if not rows:
                return
            norms = measure.grad_norms(tracked)
            gnorms = measure.grad_norms(grads)
            dev = norms.device
            packed = torch.cat([norms.to(dev), gnorms.to(dev), torch.stack(stats).reshape(-1).to(dev)])
        dtypes = [p.dtype for p in tracked]

        def decode(vals: list[float]) -> Iterable[Event]:
            n = len(rows)
            pn, gn, st = vals[:n], vals[n:n + len(grads)], vals[n + len(grads):]
            gi_ = 0
            for i, (name, dtype, numel, req, has_grad, group, lr, adam) in enumerate(rows):
                rel, unchanged, moved, typical, push = st[5 * i:5 * i + 5]
                g = gn[gi_] if has_grad else None
                gi_ += has_grad
                if g is not None:
                    self._grad_sq[step] = self._grad_sq.get(step, 0.0) + g * g
                low = dtypes[i] in measure.LOW_PRECISION
                intended = lr if adam else (lr * push if math.isfinite(push) else None)
                yield ParamStats(
                    step=step, name=name, dtype=dtype, numel=numel, requires_grad=req,
                    norm=pn[i], grad=g, has_grad=has_grad, update=rel,
                    unchanged=None if math.isnan(unchanged) else unchanged, moved=moved,
                    spacing=measure.spacing(dtypes[i], typical) if low else None,
                    intended=intended, optimizer=index, group=group,
                )

        self.defer(packed, decode)
        for root in [m for m, _ in self._roots.items()][:1]:
            self._stray_grads(root, step)

    def _stray_grads(self, root: Any, step: int) -> None:
        """Parameters of the trained model that get gradients no optimizer holds."""
        if root is None:
            return
        held = {id(p) for opt, _ in self._optimizers.items() for g in opt.param_groups for p in g["params"]}
        stray = [(n, p) for n, p in root.named_parameters()
                 if p.requires_grad and p.grad is not None and id(p) not in held]
        if not stray:
            return
        with torch.no_grad():
            gn = measure.grad_norms([p.grad for _, p in stray])

        def decode(vals: list[float]) -> Iterable[Event]:
            for (n, p), g in zip(stray, vals):
                yield ParamStats(step=step, name=n, dtype=str(p.dtype), numel=p.numel(),
                                 requires_grad=p.requires_grad, norm=math.nan, grad=g,
                                 has_grad=True, optimizer=-1)

        self.defer(gn, decode)

    def _optimizer_event(self, opt: Any, index: int) -> Optimizer:
        groups = []
        for gi, g in enumerate(opt.param_groups):
            ps = g["params"]
            beta = g.get("betas", (g.get("momentum", 0.0),))[0]
            groups.append(ParamGroup(
                index=gi, lr=float(g.get("lr", 0.0)), names=tuple(self._pname(p) for p in ps),
                dtypes=tuple(str(p.dtype) for p in ps), numel=sum(p.numel() for p in ps),
                weight_decay=float(g.get("weight_decay", 0.0)), momentum=float(beta or 0.0),
            ))
        return Optimizer(step=self.step, index=index, cls=type(opt).__name__, groups=tuple(groups))

    def _pname(self, p: Any) -> str:
        return self._pnames.get(p) or f"param{tuple(p.shape)}"

    def _name_params(self, opt: Any) -> None:
        """Name the optimizer's parameters after the module (forward roots seen so far, or an
        nn.Module in the user's frames) that holds the most of them."""
        ids = {id(p) for g in opt.param_groups for p in g["params"]}
        candidates = [m for m, _ in self._roots.items()] + frame_modules(sys._getframe(1))
        best = max((m for m in candidates if m is not None),
                   key=lambda m: (sum(id(p) in ids for p in m.parameters()), sum(1 for _ in m.parameters())),
                   default=None)
        if best is not None:
            self._name_from(getattr(best, "_orig_mod", best), override=True)
        for gi, g in enumerate(opt.param_groups):
            for pi, p in enumerate(g["params"]):
                if p not in self._pnames:
                    self._pnames[p] = f"group{gi}.param{pi}{list(p.shape)}"

    # ---- backward and loss ------------------------------------------------------------------
    def on_backward(self, loss: torch.Tensor) -> None:
        if self.round_done or self._cleared:  # a step ended, or the script dropped the last one
            self._close_round()
        step, micro = self.step, self._micro
        self._micro += 1
        self._trained = True
        if loss.numel() != 1:
            return
        constant = loss.grad_fn is None
        where = user_site(3) if self.sampled else ""
        if self.sampled or self._nan_flags:  # forward flags are only taken on sampled steps
            self._pack_activations()

        sums = self._loss_sum

        def decode(vals: list[float]) -> Iterable[Event]:
            sums[step] = sums.get(step, 0.0) + vals[0]  # the step's loss, emitted at its end
            yield Backward(step=step, value=vals[0], constant=constant, micro=micro, where=where)

        scale = self.loss_scales.pop(id(loss), None)
        value = loss.detach() if scale is None else loss.detach() / scale
        self.defer(value, decode)  # no copy, no sync: read at the flush

    # ---- clip, batches, classification, casts -------------------------------------------------
    def on_clip(self, total_norm: Any, max_norm: float) -> None:
        if not isinstance(total_norm, torch.Tensor):
            total_norm = torch.tensor(float(total_norm))
        if self.grad_scale is not None:  # a device op, no sync: the norm in the user's units
            total_norm = total_norm.detach() / self.grad_scale.to(total_norm.device)
        step, where = self.current_step, user_site(3) if self.measuring else ""
        self._clipped.add(step)

        def decode(vals: list[float]) -> Iterable[Event]:
            yield Clip(step=step, norm=vals[0], max_norm=float(max_norm), where=where)
            yield Scalar(step=step, name="grad_norm", value=vals[0])

        self.defer(total_norm.detach(), decode)

    def on_batch(self, dataset: str, length: int, iterator: int, index: int, fingerprint: str) -> None:
        self.emit(Batch(step=self.current_step, loader=dataset, iterator=iterator, index=index,
                        fingerprint=fingerprint, loader_len=length))

    def on_classification(self, classes: int, value: torch.Tensor) -> None:
        step = self.current_step

        def decode(vals: list[float]) -> Iterable[Event]:
            yield Classification(step=step, classes=classes, value=vals[0])

        self.defer(value.detach(), decode)

    def on_cast(self, module: Any, dtype: Any) -> None:
        self.emit(Cast(module=type(module).__name__, dtype=str(dtype), where=user_site(3)))

    # ---- forward (sampled steps only) --------------------------------------------------------
    def adopt_model(self, module: Any) -> None:
        """A model being trained: name its modules and parameters after the largest model in
        the user's frames that contains it (so ``model.backbone(x)`` called directly still
        gives ``backbone.0.weight``, not ``0.weight``)."""
        if module in self._roots or len(self._roots) >= 8:
            return
        self._roots[module] = True
        owner = largest_container(module, frame_modules(sys._getframe(1)))
        self._name_from(getattr(owner, "_orig_mod", owner))  # torch.compile's wrapper

    def _name_from(self, model: Any, override: bool = False) -> None:
        for name, m in model.named_modules():
            if override or m not in self._mnames:
                self._mnames[m] = name or type(model).__name__
        for name, p in model.named_parameters(remove_duplicate=False):
            if override or p not in self._pnames:
                self._pnames[p] = name

    def on_root_forward(self, module: Any, output: Any) -> None:
        self.adopt_model(module)
        outs = measure.first_float_tensors(output, limit=1)
        if not outs:
            return
        spread = measure.output_spread(outs[0])
        step, name = self.current_step, self._mnames.get(module, type(module).__name__)

        def decode(vals: list[float]) -> Iterable[Event]:
            nan, sp, scale, lo, hi = vals
            if math.isnan(sp):
                yield Activation(step=step, module=name, type=type(module).__name__, nan=bool(nan), is_output=True)
            else:
                yield Activation(step=step, module=name, type=type(module).__name__, nan=bool(nan),
                                 spread=sp, scale=scale, lo=lo, hi=hi, is_output=True)

        self.defer(spread, decode)

    def on_module_output(self, module: Any, output: Any) -> None:
        outs = measure.first_float_tensors(output, limit=2)
        if not outs:
            return
        name = self._mnames.get(module, type(module).__name__)
        flag = torch.stack([torch.isnan(t).any() for t in outs]).any()
        self._nan_flags.append((name, type(module).__name__, flag))
        if isinstance(module, (torch.nn.ReLU, torch.nn.ReLU6)):
            active = measure.unit_activity(outs[0])
            if active is None:
                return
            prev = self._relu.get(module)
            if prev is not None and prev[2].shape == active.shape:
                active = active | prev[2]
                batches = prev[3] + 1
            else:
                batches = 1
            self._relu[module] = (name, type(module).__name__, active, min(batches, RELU_WINDOW))

    def _pack_activations(self) -> None:
        """Turn this step's forward flags into one pending entry (at backward, sampled steps)."""
        flags, self._nan_flags = self._nan_flags, []
        # A ReLU unit is judged over windows of RELU_WINDOW sampled batches: "ever active since
        # the start" would count units that died later as alive.
        relus = [r for r in self._relu.values() if r[3] >= RELU_WINDOW]
        for module in [m for m, r in self._relu.items() if r[3] >= RELU_WINDOW]:
            self._relu.pop(module)
        if not flags and not relus:
            return
        step = self.step
        with torch.no_grad():
            parts = [torch.stack([f for _, _, f in flags]).float()] if flags else []
            parts += [1.0 - a.float().mean().reshape(1) for _, _, a, _ in relus]
            dev = parts[0].device
            packed = torch.cat([t.to(dev).reshape(-1) for t in parts])

        def decode(vals: list[float]) -> Iterable[Event]:
            nflags = len(flags)
            for (name, type_, _), v in zip(flags, vals[:nflags]):
                if v:
                    yield Activation(step=step, module=name, type=type_, nan=True)
                    break
            for (name, type_, active, batches), dead in zip(relus, vals[nflags:]):
                yield Activation(step=step, module=name, type=type_, dead=dead,
                                 units=active.numel(), batches=batches)

        self.defer(packed, decode)

    # ---- the one batched transfer ------------------------------------------------------------
    def _flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        by_device: dict[Any, list[int]] = {}
        for i, entry in enumerate(pending):
            if isinstance(entry, tuple):
                by_device.setdefault(entry[0].device, []).append(i)
        values: list[list[float]] = [[] for _ in pending]
        for idxs in by_device.values():
            tensors = [entry[0] for i in idxs if isinstance(entry := pending[i], tuple)]
            flat = torch.cat([t.detach().reshape(-1).float() for t in tensors])
            out = flat.tolist()  # the sync point: one per device per sampled step
            pos = 0
            for i, tensor in zip(idxs, tensors):
                n = tensor.numel()
                values[i] = out[pos:pos + n]
                pos += n
        emit = self.emit
        for i, entry in enumerate(pending):
            if isinstance(entry, tuple):
                for event in entry[1](values[i]):
                    emit(event)
            elif isinstance(entry, _RoundEnd):
                self._end_round(entry)
            else:
                emit(entry)

    def _end_round(self, end: _RoundEnd) -> None:
        """The round's loss and gradient norm, then how each optimizer's step ended."""
        step = end.step
        loss = self._loss_sum.pop(step, None)
        # A round the script dropped on purpose (backward, then zero_grad and no step, while
        # it steps its optimizer elsewhere) trained on nothing: its loss is not the training
        # loss. Its Backward events still carry the values.
        dropped = self._taken and all(o == SKIPPED_BY_SCRIPT for _, o, _ in end.outcomes)
        if loss is not None and not dropped:
            self.emit(Scalar(step=step, name="loss", value=loss))
        grad_sq = self._grad_sq.pop(step, None)
        if step in self._clipped:
            self._clipped.discard(step)
        elif grad_sq is not None:
            self.emit(Scalar(step=step, name="grad_norm", value=math.sqrt(grad_sq)))
        for index, outcome, taken in end.outcomes:
            self.emit(StepEnd(step=step, optimizer=index, outcome=outcome, taken=taken))


def _has_grads(opt: Any) -> bool:
    """Does any parameter ``opt`` holds have a gradient? (stops at the first one: O(1) in a
    normal step, a full scan only when nothing has one)"""
    return any(p.grad is not None for g in opt.param_groups for p in g["params"])
