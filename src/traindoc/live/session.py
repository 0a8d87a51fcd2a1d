"""A live observation session: step bookkeeping, sampling, and the one batched transfer.

The probes (``live/probes/``) call the ``on_*`` methods from torch's hooks. Tensors measured
during a step stay on their device in ``_pending``; at the end of each *sampled* step they are
concatenated and read back with one ``.tolist()`` per device (the only GPU sync traindoc adds),
decoded into events and fed to the engine.

Steps: ``step`` counts optimizer steps (0-based). A step "round" holds at most one ``step()`` per
optimizer; the round closes at the next ``backward()`` after an optimizer stepped, or when an
optimizer steps a second time (several optimizers, GANs, LBFGS closures all fit this rule).
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
    Activation, Backward, Batch, Cast, Classification, Clip, Event, Optimizer, ParamGroup,
    ParamStats, RunEnd, RunStart, Scalar,
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
        self._step_loss: dict[int, list[int]] = {}
        self._pending: list[tuple[torch.Tensor, Decoder]] = []
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
        self.on_sampling_change: Callable[[bool], None] | None = None
        # Loss tensors scaled by an AMP GradScaler (id -> scale tensor), set by the AMP probe,
        # so the loss signal is the user's loss, not loss * scale.
        self.loss_scales: dict[int, torch.Tensor] = {}
        # Set by the AMP probe while a clip call sees gradients still multiplied by a GradScaler's
        # scale (clipping before scaler.unscale_), so the clip's norm is reported unscaled.
        self.grad_scale: torch.Tensor | None = None
        # Called with the step that just ended (before the counter moves on).
        self.round_listeners: list[Callable[[int], None]] = []
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

    def finish(self, status: str = "ok") -> Report:
        self._close_round(final=True)
        self.emit(RunEnd(steps=self.current_step, duration_s=time.perf_counter() - self._t0, status=status))
        report = self.engine.finish()
        for probe, error in sorted(self.failed.items()):
            report.disabled.append((f"probe:{probe}", error))
        return report

    def fail(self, probe: str, exc: BaseException) -> None:
        """A probe raised: remember it once; the caller disables it. Never reaches the user."""
        if probe not in self.failed:
            self.failed[probe] = f"{type(exc).__name__}: {exc}"
            sys.stderr.write(f"traindoc: internal error in probe {probe!r}, disabled it: {exc}\n")

    def _close_round(self, final: bool = False) -> None:
        if self.sampled or final or len(self._pending) > 512:
            self._flush()
        if final:
            return
        for listener in self.round_listeners:
            listener(self.step)
        self.step += 1
        self.round_done = False
        self._stepped.clear()
        self._micro = 0
        self.sampled = self.next_sampled

    # ---- optimizers ---------------------------------------------------------------------------
    def on_optimizer_created(self, opt: Any) -> None:
        if opt not in self._optimizers:
            self._optimizers[opt] = len(self._optimizers)

    def on_step_pre(self, opt: Any) -> None:
        if self.round_done and id(opt) in self._stepped:
            self._close_round()
        self.on_optimizer_created(opt)
        if not self.sampled:
            return
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
        first = not self.round_done
        self._stepped.add(id(opt))
        self.round_done = True
        if self.sampled and opt in self._optimizers:
            self._measure_step(opt)
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
        first = not self.round_done
        self._stepped.add(id(opt))
        self.round_done = True
        if first:
            self._sample_next()

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
        if self.round_done:
            self._close_round()
        step, micro = self.step, self._micro
        self._micro += 1
        if loss.numel() != 1:
            return
        constant = loss.grad_fn is None
        where = user_site(3) if self.sampled else ""
        if self.sampled or self._nan_flags:  # forward flags are only taken on sampled steps
            self._pack_activations()

        def decode(vals: list[float]) -> Iterable[Event]:
            yield Backward(step=step, value=vals[0], constant=constant, micro=micro, where=where)

        scale = self.loss_scales.pop(id(loss), None)
        value = loss.detach() if scale is None else loss.detach() / scale
        self.defer(value, decode)  # no copy, no sync: read at the flush
        self._step_loss.setdefault(step, []).append(len(self._pending) - 1)

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
        self._step_loss, step_loss = {}, self._step_loss
        by_device: dict[Any, list[int]] = {}
        for i, (t, _) in enumerate(pending):
            by_device.setdefault(t.device, []).append(i)
        values: list[list[float]] = [[] for _ in pending]
        for idxs in by_device.values():
            flat = torch.cat([pending[i][0].detach().reshape(-1).float() for i in idxs])
            out = flat.tolist()  # the sync point: one per device per sampled step
            pos = 0
            for i in idxs:
                n = pending[i][0].numel()
                values[i] = out[pos:pos + n]
                pos += n
        for i, (_, decode) in enumerate(pending):
            for event in decode(values[i]):
                self.emit(event)
        for step, idxs in sorted(step_loss.items()):
            self.emit(Scalar(step=step, name="loss", value=sum(values[i][0] for i in idxs)))
            if step not in self._clipped and step in self._grad_sq:
                self.emit(Scalar(step=step, name="grad_norm", value=math.sqrt(self._grad_sq[step])))
        self._grad_sq.clear()
        self._clipped = {s for s in self._clipped if s > self.step}
