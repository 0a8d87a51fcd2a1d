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
import weakref
from typing import Any, Callable, Iterable

import torch

from traindoc import config, detectors
from traindoc.engine import Engine, Report
from traindoc.events import (
    NO_GRADS, SKIPPED_BY_SCALER, SKIPPED_BY_SCRIPT, STEPPED, Backward, Clip, Event, Phase, RunEnd,
    RunStart, Scalar, StepBegin, StepEnd,
)
from traindoc.findings import Finding
from traindoc.live import measure
from traindoc.live.levels import LEVELS, PROBE_SIGNALS
from traindoc.live.model import ModelWatch
from traindoc.live.manual import ManualSteps, ManualUpdate
from traindoc.live.objects import ObjectMap, user_site

# A deferred measurement in the pending list: (tensor, decoder, arguments); at the flush,
# ``decoder(values, *arguments)`` makes its events. The session's own measurements of every
# step (the loss, the clip norm) pass arguments rather than make a closure at every step.
Deferred = tuple[torch.Tensor, Callable[..., Iterable[Event]], tuple[Any, ...]]
# Lifecycle markers in the pending list, tuples like the deferred measurements but with None
# where those hold their tensor (made at every step: a tuple, not an object with an __init__):
# (None, step, outcomes): the round ``step`` ended; its loss, gradient norm and outcomes are
# emitted once the values before it are decoded. (None, step, None): ``step`` begins.
Marker = tuple[None, int, "list[tuple[int, str, int]] | None"]


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
        # The routine lifecycle (StepBegin, StepEnd of a step that took effect) is one or two
        # events per step: made only when something reads them (a detector, a recording).
        self._routine = sink is not None or self.engine.wants("lifecycle")
        self.step = 0
        self.round_done = False
        self.sampled = self.level.sampled(0)
        self.next_sampled = self.sampled
        # Is the work happening now on a sampled step? (``next_sampled`` once an optimizer
        # stepped in this round, else ``sampled``: kept as a plain attribute, read many times
        # a step)
        self.measuring = self.sampled
        self._stepped: set[int] = set()
        self.micro = 0  # backward() calls in this round
        self._outcomes: list[tuple[int, str, int]] = []  # (optimizer, outcome, taken) this round
        self._ended = 0  # outcomes of this round already ended in the stream
        self._taken: dict[int, int] = {}  # optimizer index -> steps that took effect
        self._cleared = False  # gradients cleared since this round's last backward
        self.trained = False  # a backward or an optimizer step was seen
        # A step before any gradient was computed, on zero gradients: a framework allocating
        # its optimizer's state (deepspeed.initialize does), not training. Skipped whole.
        self.setup_step = False
        self._phase = 0
        self._loss_sum: dict[int, float] = {}  # step -> sum of its decoded backward values
        # In stream order: measurements to read back, round ends, and events that must not
        # overtake the measurements before them.
        self._pending: list[Deferred | Marker | Event] = []
        self._started = time.time()
        self._t0 = time.perf_counter()
        self._optimizers = ObjectMap()  # optimizer -> index (weak: never keeps it alive)
        # The optimizer seen last and its index (a plain reference would keep it alive).
        self._last_opt_ref: Callable[[], Any] = lambda: None
        self._last_index = -1
        self.model = ModelWatch(self)  # names and sampled measurements of the model
        self.manual = ManualSteps(self)  # steps written by hand, without torch.optim
        self._clipped: set[int] = set()
        self.grad_sq: dict[int, float] = {}  # step -> sum of squared gradient norms measured
        self.failed: dict[str, str] = {}
        self._failed_at: dict[str, int] = {}
        # Called with True when sampled steps begin and False when they end (forward hooks and
        # other sampled-only instruments go on and off), when the level measures activations.
        self.sampling_listeners: list[Callable[[bool], None]] = []
        self.in_model_forward = False  # a model's forward is running (set by the core probe)
        # A torch.compile'd model is trained: no global module hook of traindoc goes up any more
        # (dynamo guards on them, and would compile again each time they change).
        self.compiled = False
        # Loss tensors scaled by an AMP GradScaler (id -> scale tensor), set by the AMP probe,
        # so the loss signal is the user's loss, not loss * scale.
        self.loss_scales: dict[int, torch.Tensor] = {}
        # Set by the AMP probe while a clip call sees gradients still multiplied by a GradScaler's
        # scale (clipping before scaler.unscale_), so the clip's norm is reported unscaled.
        self.grad_scale: torch.Tensor | None = None
        # Called with the step that just ended (before the counter moves on).
        self.round_listeners: list[Callable[[int], None]] = []
        # The same, for the rounds of sampled steps only (what sampled steps measured).
        self.sampled_round_listeners: list[Callable[[int], None]] = []
        # Called once, with the optimizer, just before the run's first optimizer step (the
        # model is built by then); emptied after, so later steps pay one truth test.
        self.first_step_listeners: list[Callable[[Any], None]] = []
        # Model parameters a framework's own optimizer updates through copies it steps (the
        # fp32 master weights of DeepSpeed's bf16/fp16 optimizers): held, though by no torch optimizer.
        self.framework_held = ObjectMap()  # parameter -> True (a WeakSet compares tensors with ==)
        # Called with (module, output) for every module output of a sampled training forward.
        self.output_listeners: list[Callable[[Any, Any], None]] = []
        # Called with every event emitted (the guard watches the stream through this).
        self.event_listeners: list[Callable[[Event], None]] = []

    # ---- bookkeeping -------------------------------------------------------------------------
    @property
    def current_step(self) -> int:
        """The step that work happening now belongs to (the next one once an optimizer stepped)."""
        return self.step + 1 if self.round_done else self.step

    def defer(self, tensor: torch.Tensor, decode: Callable[..., Iterable[Event]], *args: Any) -> None:
        """Keep ``tensor`` on its device until the next flush, then call ``decode`` with its
        values (a list of floats) and ``args`` to make events. Probes use this instead of
        ``.item()``."""
        if type(tensor) is not torch.Tensor and hasattr(tensor, "to_local"):  # traindoc-ranks: a
            tensor = tensor.to_local()  # DTensor (FSDP2): this rank's part, never a collective
        self._pending.append((tensor, decode, args))

    def next_step_begins(self) -> None:
        """The next step's work begins (a model's forward, a loss call) while this round is
        done: end this round in the stream first, so that the next step's measurements never
        overtake this step's end (the backward that closes the round comes later)."""
        if not self.round_done and self.micro:
            self.manual.step_ended()  # a hand-written update ends the round (post-step hooks)
        if self.round_done:
            self._mark_end()

    def emit(self, event: Event) -> None:
        if self._sink is not None:
            self._sink(event)
        self.engine.feed(event)
        for listener in self.event_listeners:
            listener(event)

    def flush(self) -> None:
        """Read the pending device values now and emit their events (one sync per device),
        ending the round here if an optimizer already stepped in it (a later optimizer of the
        same round ends it again, for itself). Only the opt-in guard calls this, right after a
        step, to act on that step's findings."""
        self._mark_end()
        self._flush()
        self.engine.flush()  # the guard acts on this step's findings: the column detectors judge now

    def _mark_end(self, begin_next: bool = True) -> None:
        """End the current round in the stream for the optimizers that stepped in it so far,
        then begin the next: the next step's measurements (its forward pass runs before the
        backward that closes this round) must not overtake this step's end. An optimizer that
        steps later in the same round gets an end of its own."""
        if not self.round_done or self._ended >= len(self._outcomes):
            return
        first = self._ended == 0
        self._pending.append((None, self.step, self._outcomes[self._ended:]))
        self._ended = len(self._outcomes)
        if first and begin_next and self._routine:
            self._pending.append((None, self.step + 1, None))

    def models(self) -> list[Any]:
        """The models seen training so far (roots of forward passes), still alive."""
        return self.model.models()

    def elapsed(self, at: float | None = None) -> float:
        """Seconds from the session's start to ``at`` (a ``time.perf_counter()``; now)."""
        return (time.perf_counter() if at is None else at) - self._t0

    def optimizers(self) -> list[Any]:
        """The optimizers seen so far, still alive, in the order they were first seen."""
        return [opt for opt, _ in sorted(self._optimizers.items(), key=lambda kv: kv[1])]

    def optimizer_index(self, opt: Any) -> int:
        """``opt``'s index in the stream's events (-1 for one never seen)."""
        index: int = self._optimizers.get(opt, -1)
        return index

    def start(self, script: str, argv: list[str]) -> None:
        self.emit(RunStart(
            source="live", script=script, argv=tuple(argv), python=platform.python_version(),
            torch=torch.__version__, started=self._started,
            rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1)),
            level=self.level_name,
        ))
        self.emit(StepBegin(step=0))

    def resume_at(self, step: int) -> None:
        """The run resumed from a checkpoint at ``step`` (a framework's restored global step):
        this session's steps go on from there, so findings quote the user's step numbers, and
        the sampled steps are those the uninterrupted run would sample. Only before the first
        step of this session; later (or going backwards) it changes nothing."""
        if step <= self.step or self.trained or self.round_done or self.micro:
            return
        self.step = step
        sampled = self.level.sampled(step)
        if self.level.activations and sampled != self.sampled:  # hooks go on or off
            for listener in self.sampling_listeners:
                listener(sampled)
        self.sampled = self.next_sampled = self.measuring = sampled
        if self._routine:
            self.emit(StepBegin(step=step))

    def finish(self, status: str = "ok", exit_code: int = 0) -> Report:
        if not self.round_done and self.micro:
            self.manual.step_ended()  # the last round's hand-written update
        if self._outcomes:
            self._mark_end(begin_next=False)
        elif self.micro:
            self._end_dropped(begin_next=False)
        self._flush()
        self.emit(RunEnd(steps=self.current_step, duration_s=time.perf_counter() - self._t0, status=status,
                         trained=self.trained, exit_code=exit_code,
                         optimizer_steps=sum(self._taken.values())))
        report = self.engine.finish()
        chosen = report.ran + [id_ for id_, _ in report.not_applicable]
        for probe, error in sorted(self.failed.items()):
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

    def _end_dropped(self, begin_next: bool = True) -> None:
        """End a round in which backward ran and no optimizer stepped (the script dropped it)."""
        self._pending.append((None, self.step, [(-1, SKIPPED_BY_SCRIPT, 0)]))
        if begin_next and self._routine:
            self._pending.append((None, self.step + 1, None))

    def _close_round(self) -> None:
        step, sampled = self.step, self.sampled
        if self._outcomes:
            self._mark_end()
        else:
            self._end_dropped()
        if sampled or len(self._pending) > 512:
            self._flush()
        for listener in self.round_listeners:
            listener(step)
        if sampled:
            for listener in self.sampled_round_listeners:
                listener(step)
        self.step = step + 1
        self.round_done = False
        self._stepped.clear()
        self._outcomes = []
        self._ended = 0
        self.micro = 0  # backward() calls in this round
        self._cleared = False
        self.sampled = self.measuring = self.next_sampled

    def listen_round(self, listener: Callable[[int], None]) -> None:
        """Call ``listener`` at the end of each round from now on (once, however often asked):
        for a probe with work at a round's end only after something happened."""
        if listener not in self.round_listeners:
            self.round_listeners = [*self.round_listeners, listener]  # a new list: never one being run

    def unlisten_round(self, listener: Callable[[int], None]) -> None:
        if listener in self.round_listeners:
            self.round_listeners = [fn for fn in self.round_listeners if fn != listener]

    # ---- optimizers ---------------------------------------------------------------------------
    def mark_compiled(self) -> None:
        """The model is ``torch.compile``'d: the sampled-only global hooks come down for good."""
        if not self.compiled:
            self.compiled = True
            for listener in self.sampling_listeners:
                listener(False)

    def on_optimizer_created(self, opt: Any) -> None:
        if opt is self._last_opt_ref():  # the common case, every step: no weak-map lookup
            return
        if opt not in self._optimizers:
            if opt is not self.manual.update:
                self.manual.off = True  # a torch.optim optimizer: no stand-in needed
            index = len(self._optimizers)
            self._optimizers[opt] = index
            if self._taken:  # another optimizer trained already: a new phase begins
                self._phase += 1
                reason = (f"a new optimizer ({type(opt).__name__}) after "
                          f"{sum(self._taken.values())} optimizer steps")
                self._pending.append(Phase(step=self.current_step, index=self._phase, reason=reason))
        self._last_opt_ref = weakref.ref(opt)
        self._last_index = self._optimizers.get(opt, -1)

    def on_zero_grad(self) -> None:
        """The script cleared gradients (``optimizer.zero_grad()`` / ``model.zero_grad()``)."""
        if self.micro and not self.round_done:
            self._cleared = True

    def on_step_pre(self, opt: Any, closure: bool = False) -> None:
        """Bookkeeping first (never disabled), then the sampled measurement (may be)."""
        if not self.trained:  # until the first backward or step: nothing else pays for it
            self.setup_step = not closure and not isinstance(opt, ManualUpdate) and measure.zero_grads(opt)
            if self.setup_step:
                return
        if self.first_step_listeners:
            listeners, self.first_step_listeners = self.first_step_listeners, []
            for listener in listeners:
                listener(opt)
        self._step_begins(opt)
        if self.sampled and "params" not in self.failed:
            try:
                self.model.snapshot(opt)
            except Exception as exc:  # never let traindoc break the user's training
                self.fail("params", exc)

    def on_step_post(self, opt: Any) -> None:
        """After ``opt.step()``. ``on_step_pre`` runs only before the steps it measures and
        the first one (``Patcher.on_step``): the bookkeeping of every step's beginning is done
        here when it did not run (a no-op when it did)."""
        if self.setup_step:
            return
        self._step_begins(opt)
        self._end_step(opt, _has_grads(opt))
        if self.sampled and opt in self._optimizers and "params" not in self.failed:
            try:
                self.model.measure_step(opt)
            except Exception as exc:  # never let traindoc break the user's training
                self.fail("params", exc)

    def _step_begins(self, opt: Any) -> None:
        """A step of ``opt`` begins: it ends the round if ``opt`` stepped in it already (no
        backward between: several optimizers, LBFGS, a step taken twice); ``opt`` may be new."""
        if self.round_done and id(opt) in self._stepped:
            self._close_round()
        if opt is not self._last_opt_ref():  # the common case, every step: no call
            self.on_optimizer_created(opt)

    def _end_step(self, opt: Any, stepped: bool | None) -> None:
        """``opt``'s part of this round ended: it stepped (True), stepped with no gradient
        (False) or was skipped by a GradScaler (None)."""
        first = not self.round_done
        self._stepped.add(id(opt))
        self.round_done = True
        self.trained = True
        index = self._last_index if opt is self._last_opt_ref() else self._optimizers.get(opt, -1)
        taken = self._taken.get(index, 0)
        if stepped:
            taken += 1
            self._taken[index] = taken
        outcome = STEPPED if stepped else NO_GRADS if stepped is False else SKIPPED_BY_SCALER
        self._outcomes.append((index, outcome, taken))
        if first:  # is the next step sampled?
            self.next_sampled = self.measuring = self.level.sampled(self.step + 1)
            if self.level.activations and self.next_sampled != self.sampled:  # hooks go on or off
                for listener in self.sampling_listeners:
                    listener(self.next_sampled)

    def on_step_skipped(self, opt: Any) -> None:
        """``opt.step()`` did not run: an AMP GradScaler found Inf/NaN gradients and skipped it.
        The step still ends, as in the user's loop (whose counter and scheduler move on), so the
        steps stay aligned; nothing is measured for it."""
        self._step_begins(opt)
        self._end_step(opt, None)

    # ---- backward and loss ------------------------------------------------------------------
    def on_backward(self, loss: torch.Tensor | None) -> None:
        """A backward starts from ``loss`` (None: from several tensors, not followed)."""
        if loss is None:
            return
        if self.round_done or self._cleared:  # a step ended, or the script dropped the last one
            self._close_round()
        micro = self.micro
        self.micro = micro + 1
        self.trained = True
        self.setup_step = False
        if loss.numel() != 1:
            return
        grad_fn = loss.grad_fn
        constant = grad_fn is None or (
            type(grad_fn).__name__ in measure.SCALAR_PATH and self._fresh_constant(loss))
        where = ""
        if self.sampled:
            where = user_site(1)
            self.model.pack_activations()
        elif self.model.nan_flags:  # forward flags are only taken on sampled steps
            self.model.pack_activations()
        value = loss.detach()  # no copy, no sync: read at the flush
        if self.loss_scales:
            scale = self.loss_scales.pop(id(loss), None)
            if scale is not None:
                value = value / scale
        self.defer(value, _decode_backward, self._loss_sum, self.step, micro, constant, where)

    def _fresh_constant(self, loss: torch.Tensor) -> bool:
        """A scalar the script made (``torch.tensor(3.0, requires_grad=True)``, maybe scaled)
        that no optimizer holds: its gradient reaches no parameter."""
        leaf = measure.scalar_leaf(loss)
        if leaf is None:
            return False
        return not any(leaf is p for opt in self.optimizers() for g in opt.param_groups for p in g["params"])

    # ---- clip ------------------------------------------------------------------------------------
    def on_clip(self, total_norm: Any, max_norm: float, step: int | None = None,
                via: str = "clip_grad_norm_") -> None:
        """A clipping: the total norm before it and max_norm, at ``step`` (default: now; a
        framework that reports its norm after the optimizer stepped gives the step it took)."""
        if not isinstance(total_norm, torch.Tensor):
            total_norm = torch.tensor(float(total_norm))
        if self.grad_scale is not None:  # a device op, no sync: the norm in the user's units
            total_norm = total_norm.detach() / self.grad_scale.to(total_norm.device)
        where = user_site(2) if self.measuring else ""
        if step is None:
            step = self.current_step
        self._clipped.add(step)
        if total_norm.requires_grad:
            total_norm = total_norm.detach()
        self.defer(total_norm, _decode_clip, step, max_norm, where, via)

    def clip_pending(self, step: int) -> None:
        """A clipping of ``step`` will be reported once the step took it: the gradients measured
        in the step are clipped ones, so they give no gradient norm of their own."""
        self._clipped.add(step)

    # ---- the one batched transfer ------------------------------------------------------------
    def _flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        read = iter(measure.read_back([e[0] for e in pending if isinstance(e, tuple) and e[0] is not None]))
        emit = self.emit
        for entry in pending:
            if isinstance(entry, tuple):
                if entry[0] is None:  # a lifecycle marker
                    if entry[2] is None:
                        emit(StepBegin(step=entry[1]))
                    else:
                        self._end_round(entry[1], entry[2])
                    continue
                vals = next(read)
                if "decode" in self.failed:
                    continue
                try:  # a probe's decoder must not stop the stream (the lifecycle is in it)
                    events = list(entry[1](vals, *entry[2]))
                except Exception as exc:  # never let traindoc break the user's training
                    self.fail("decode", exc)
                    continue
                for event in events:
                    emit(event)
            else:
                emit(entry)
        # The column detectors (loss spikes, divergence) judge in chunks of the engine's size,
        # not at every sampled step: each judgement has a fixed cost that a small model's
        # sampled step would pay again and again for a few new points.

    def _end_round(self, step: int, outcomes: list[tuple[int, str, int]]) -> None:
        """The round's loss and gradient norm, then how each optimizer's step ended."""
        loss = self._loss_sum.pop(step, None)
        # A round the script dropped on purpose (backward, then zero_grad and no step, while
        # it steps its optimizer elsewhere) trained on nothing: its loss is not the training
        # loss. Its Backward events still carry the values.
        dropped = self._taken and all(o == SKIPPED_BY_SCRIPT for _, o, _ in outcomes)
        if loss is not None and not dropped:
            self.emit(Scalar(step=step, name="loss", value=loss))
        grad_sq = self.grad_sq.pop(step, None)
        clipped = step in self._clipped
        self._clipped.discard(step)
        if self._clipped:  # a clip reported after its round was read back (rare): forget it too
            self._clipped = {s for s in self._clipped if s > step}
        if not clipped and grad_sq is not None:
            self.emit(Scalar(step=step, name="grad_norm", value=math.sqrt(grad_sq)))
        for index, outcome, taken in outcomes:
            if outcome != STEPPED or self._routine:
                self.emit(StepEnd(step=step, optimizer=index, outcome=outcome, taken=taken))


def _decode_backward(vals: list[float], sums: dict[int, float], step: int, micro: int, constant: bool,
                     where: str) -> tuple[Event, ...]:
    sums[step] = sums.get(step, 0.0) + vals[0]  # the step's loss, emitted at its end
    return (Backward(step=step, value=vals[0], constant=constant, micro=micro, where=where),)


def _decode_clip(vals: list[float], step: int, max_norm: float, where: str, via: str) -> tuple[Event, ...]:
    return (Clip(step=step, norm=vals[0], max_norm=float(max_norm), where=where, via=via),
            Scalar(step=step, name="grad_norm", value=vals[0]))


def _has_grads(opt: Any) -> bool:
    """Does any parameter ``opt`` holds have a gradient? (stops at the first one: O(1) in a
    normal step, a full scan only when nothing has one). A hand-written update clears them:
    the stand-in says whether they were there before it."""
    if isinstance(opt, ManualUpdate):
        return opt.had_grads
    for g in opt.param_groups:  # loops, not any(genexpr): this runs at every step
        for p in g["params"]:
            if p.grad is not None:
                return True
    return False
