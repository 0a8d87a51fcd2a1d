"""A live observation session: what torch's hooks saw, told to the step clock and the stream.

The probes (``live/probes/``) call the ``on_*`` methods from torch's hooks. The step clock
(``live/clock.py``) says which step that work belongs to and whether it is sampled; what the
probes measure waits on its device in the stream (``live/stream.py``) and is read back in one
transfer at the end of each sampled step, decoded into events and fed to the engine.

The step bookkeeping never runs inside a probe that can be disabled: a measurement that fails
(an unexpected dtype, a tensor subclass) disables that measurement only, and the report names
the detectors it left blind.
"""

from __future__ import annotations

import os
import platform
import sys
import time
import weakref
from typing import Any, Callable, Iterable

import torch

from traindoc import config, detectors
from traindoc.engine import Engine, Report
from traindoc.events import Event, Forwards, Phase, RunEnd, RunStart, StepBegin
from traindoc.findings import Finding
from traindoc.live import measure
from traindoc.live.clock import StepClock
from traindoc.live.levels import LEVELS, PROBE_SIGNALS
from traindoc.live.model import ModelWatch
from traindoc.live.manual import ManualSteps, ManualUpdate
from traindoc.live.objects import ObjectMap, user_site
from traindoc.live.stream import Stream


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
        routine = sink is not None or self.engine.wants("lifecycle")
        self.failed: dict[str, str] = {}
        self._failed_at: dict[str, int] = {}
        self.stream = Stream(self.emit, self.fail, self.failed, routine=routine)
        self.defer = self.stream.defer  # what probes measure, read back at the next flush
        self.clock = StepClock(self.level, self.stream.pending, routine=routine, on_close=self._round_closed)
        self.stream.taken = self.clock.taken
        # A step before any gradient was computed, on zero gradients: a framework allocating
        # its optimizer's state (deepspeed.initialize does), not training. Skipped whole.
        self.setup_step = False
        self._phase = 0
        self._forwards_sent = (0, 0, False)  # the last model calls, rows, bootstrap sent (Forwards)
        self._inferring = 0  # sampled backwards in a row whose targets the model computed (Forwards)
        self._started = time.time()
        self._t0 = time.perf_counter()
        self._optimizers = ObjectMap()  # optimizer -> index (weak: never keeps it alive)
        # The optimizer seen last and its index (a plain reference would keep it alive).
        self._last_opt_ref: Callable[[], Any] = lambda: None
        self._last_index = -1
        self._reevaluating: set[int] = set()  # optimizers whose step re-evaluates its closure
        self.model = ModelWatch(self)  # names and sampled measurements of the model
        self.manual = ManualSteps(self)  # steps written by hand, without torch.optim
        # A torch.compile'd model is trained: no global module hook of traindoc goes up any more
        # (dynamo guards on them, and would compile again each time they change).
        self.compiled = False
        # Loss tensors scaled by an AMP GradScaler (id -> scale tensor), set by the AMP probe,
        # so the loss signal is the user's loss, not loss * scale.
        self.loss_scales: dict[int, torch.Tensor] = {}
        # Set by the AMP probe while a clip call sees gradients still multiplied by a GradScaler's
        # scale (clipping before scaler.unscale_), so the clip's norm is reported unscaled.
        # Model parameters a framework's own optimizer updates through copies it steps (the
        # fp32 master weights of DeepSpeed's bf16/fp16 optimizers): held, though by no torch optimizer.
        self.framework_held = ObjectMap()  # parameter -> True (a WeakSet compares tensors with ==)
        # Optimizers a framework steps and clears itself (inside DeepSpeed's engine.step(), which
        # zeroes the gradients and divides the loss by its accumulation steps): the script's
        # loop neither clears nor scales their gradients, so accumulation is not judged for them.
        self.framework_stepped = ObjectMap()  # optimizer -> True
        # The optimizers (ids) that stepped inside the framework step under way, None outside one:
        # DeepSpeed's ZeRO steps torch's optimizer once per parameter group within one
        # engine.step(), and those calls are one optimizer step (Patcher: slices).
        self.framework_step: set[int] | None = None
        # Called with (module, output) for every module output of a sampled training forward.
        self.output_listeners: list[Callable[[Any, Any], None]] = []
        # Called with every event emitted (the guard watches the stream through this).
        self.event_listeners: list[Callable[[Event], None]] = []

    # ---- bookkeeping -------------------------------------------------------------------------
    def next_step_begins(self) -> None:
        """The next step's work begins (a model's forward, a loss call) while this round is
        done: end this round in the stream first, so that the next step's measurements never
        overtake this step's end (the backward that closes the round comes later)."""
        clock = self.clock
        if not clock.round_done and clock.micro:
            self.manual.step_ended()  # a hand-written update ends the round (post-step hooks)
        if clock.round_done:
            clock.mark_end()

    def emit(self, event: Event) -> None:
        if self._sink is not None:
            self._sink(event)
        self.engine.feed(event)
        for listener in self.event_listeners:
            listener(event)

    def silence(self) -> None:
        """Nothing reaches the event record or stderr from now on: a forked child's copy of its
        parent's session, whose record and announcements are the parent's."""
        self._sink = None
        self.engine.silence()

    def flush(self) -> None:
        """Read the pending device values now and emit their events (one sync per device),
        ending the round here if an optimizer already stepped in it (a later optimizer of the
        same round ends it again, for itself). Only the opt-in guard calls this, right after a
        step, to act on that step's findings."""
        self.clock.mark_end()
        self.stream.flush()
        self.engine.flush()  # the guard acts on this step's findings: the column detectors judge now

    def models(self) -> list[Any]:
        """The models seen training so far (roots of forward passes), still alive."""
        return self.model.models()

    def elapsed(self, at: float | None = None) -> float:
        """Seconds from the session's start to ``at`` (a ``time.perf_counter()``; now)."""
        return (time.perf_counter() if at is None else at) - self._t0

    def optimizers(self) -> list[Any]:
        """The optimizers seen so far, still alive, in the order they were first seen."""
        return [opt for opt, _ in sorted(self._optimizers.items(), key=lambda kv: kv[1])]

    def held_ids(self) -> set[int]:
        """The ids of the parameters the optimizers hold."""
        return {id(p) for opt in self.optimizers() for g in opt.param_groups for p in g["params"]}

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
        if self.clock.resume_at(step):
            self.stream.flush()  # its StepBegin, now

    def finish(self, status: str = "ok", exit_code: int = 0) -> Report:
        clock = self.clock
        if not clock.round_done and clock.micro:
            self.manual.step_ended()  # the last round's hand-written update
        clock.finish()
        self.stream.flush()
        self.emit(RunEnd(steps=clock.current_step, duration_s=time.perf_counter() - self._t0, status=status,
                         trained=clock.trained, exit_code=exit_code, optimizer_steps=clock.steps_taken))
        report = self.engine.finish()
        if any(f.where for f in report.findings):
            try:
                sites = self.model.definitions()
                report.findings = [sites.add_sites(f) for f in report.findings]
            except Exception as exc:  # a report without the lines, never none
                self.fail("definitions", exc)
        chosen = report.ran + [id_ for id_, _ in report.not_applicable]
        for probe, error in sorted(self.failed.items()):
            report.disabled.append((f"probe:{probe}", self._blind(probe, error, chosen)))
        return report

    def _blind(self, probe: str, error: str, chosen: list[str]) -> str:
        """The error, from which step, and the detectors the disabled probe left blind."""
        signals = set(PROBE_SIGNALS.get(probe, ()))
        blind = [cls.id for cls in detectors.DETECTORS if cls.id in chosen
                 and signals & (set(cls.needs) | set(cls.uses))]
        at = self._failed_at.get(probe, 0)
        tail = f"; blind from step {at} on: {', '.join(blind)}" if blind else ""
        return f"{error}{tail}"

    def fail(self, probe: str, exc: BaseException) -> None:
        """A probe raised: remember it once; the caller disables it. Never reaches the user."""
        if probe not in self.failed:
            self.failed[probe] = f"{type(exc).__name__}: {exc}"
            self._failed_at[probe] = self.clock.current_step
            sys.stderr.write(f"traindoc: internal error in probe {probe!r}, disabled it: {exc}\n")

    def _round_closed(self, sampled: bool) -> None:
        """The clock closed a round: read a sampled step's measurements back now."""
        if sampled or len(self.stream.pending) > 512:
            self.stream.flush()

    # ---- optimizers ---------------------------------------------------------------------------
    def mark_compiled(self) -> None:
        """The model is ``torch.compile``'d: the sampled-only global hooks come down for good."""
        if not self.compiled:
            self.compiled = True
            self.clock.stop_sampling()

    def on_optimizer_created(self, opt: Any) -> None:
        if opt is self._last_opt_ref():  # the common case, every step: no weak-map lookup
            return
        if opt not in self._optimizers:
            if opt is not self.manual.update:
                self.manual.off = True  # a torch.optim optimizer: no stand-in needed
            index = len(self._optimizers)
            self._optimizers[opt] = index
            if self.clock.taken:  # another optimizer trained already: a new phase begins
                self._phase += 1
                reason = (f"a new optimizer ({type(opt).__name__}) after "
                          f"{self.clock.steps_taken} optimizer steps")
                self.stream.pending.append(Phase(step=self.clock.current_step, index=self._phase, reason=reason))
        self._last_opt_ref = weakref.ref(opt)
        self._last_index = self._optimizers.get(opt, -1)

    def on_zero_grad(self) -> None:
        """The script cleared gradients (``optimizer.zero_grad()`` / ``model.zero_grad()``)."""
        self.clock.cleared()

    def on_step_pre(self, opt: Any, closure: bool = False) -> None:
        """Bookkeeping first (never disabled), then the sampled measurement (may be)."""
        clock = self.clock
        if not clock.trained:  # until the first backward or step: nothing else pays for it
            self.setup_step = not closure and not isinstance(opt, ManualUpdate) and measure.zero_grads(opt)
            if self.setup_step:
                return
        clock.first_step(opt)
        self._step_begins(opt)
        if clock.sampled and "params" not in self.failed:
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
        closure = self.clock.closure
        if closure is not None and closure[0] == id(opt):  # evaluated more than once?
            self._closure_ended(opt, self.clock.backwards - closure[1])
        self._step_begins(opt)
        self._end_step(opt, _has_grads(opt))
        if self.clock.sampled and opt in self._optimizers and "params" not in self.failed:
            try:
                self.model.measure_step(opt)
            except Exception as exc:  # never let traindoc break the user's training
                self.fail("params", exc)

    def on_slice(self, opt: Any, before: bool) -> None:
        """Before or after a later call of ``opt.step()`` within the framework step under way
        (ZeRO's next parameter group): its parameters are measured with that step, which the
        call neither begins nor ends."""
        if self.clock.sampled and opt in self._optimizers and "params" not in self.failed:
            try:
                (self.model.snapshot if before else self.model.measure_step)(opt)
            except Exception as exc:  # never let traindoc break the user's training
                self.fail("params", exc)

    def _closure_ended(self, opt: Any, evaluations: int) -> None:
        """A step handed a closure ended. Several backward() calls inside it: the step
        re-evaluated the loss (a line search), which the optimizer's event now says."""
        index = self.optimizer_index(opt)
        if evaluations >= 2 and index not in self._reevaluating:
            self._reevaluating.add(index)
            try:  # a measurement, like the sampled snapshot's: it must not stop the bookkeeping
                self.emit(self.model.optimizer_event(opt, index, reevaluates=True))
            except Exception as exc:  # never let traindoc break the user's training
                self.fail("params", exc)

    def _step_begins(self, opt: Any) -> None:
        """A step of ``opt`` begins: it ends the round if ``opt`` stepped in it already (no
        backward between: several optimizers, LBFGS, a step taken twice); ``opt`` may be new."""
        self.clock.step_begins(id(opt))
        if opt is not self._last_opt_ref():  # the common case, every step: no call
            self.on_optimizer_created(opt)

    def _end_step(self, opt: Any, stepped: bool | None) -> None:
        """``opt``'s part of this round ended: it stepped (True), stepped with no gradient
        (False) or was skipped by a GradScaler (None)."""
        index = self._last_index if opt is self._last_opt_ref() else self._optimizers.get(opt, -1)
        self.clock.step_ended(id(opt), index, stepped)

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
        clock = self.clock
        micro = clock.backward()  # closes the round a step ended (or the script dropped)
        if clock.forwards:
            self._inferring = self._inferring + 1 if clock.rows > 1 and clock.rows in clock.inferred_rows else 0
            sent = (clock.forwards, clock.rows, self._inferring >= 4)
            if sent != self._forwards_sent:  # in order with pending values
                self._forwards_sent = sent
                self.stream.pending.append(Forwards(step=clock.step, count=sent[0], rows=sent[1], bootstrap=sent[2]))
            clock.forwards = clock.rows = 0
            if clock.inferred_rows:
                clock.inferred_rows.clear()
        self.setup_step = False
        if loss.numel() != 1:
            return
        grad_fn = loss.grad_fn
        constant = grad_fn is None or (
            type(grad_fn).__name__ in measure.SCALAR_PATH and self._fresh_constant(loss))
        where = ""
        if clock.sampled:
            where = user_site(1)
            self.model.pack_activations()
            self.model.on_sampled_loss(loss)
        elif self.model.nan_flags:  # forward flags are only taken on sampled steps
            self.model.pack_activations()
        value = measure.local(loss).detach()  # no copy, no sync: read at the flush
        if self.loss_scales:
            scale = self.loss_scales.pop(id(loss), None)
            if scale is not None:
                value = value / scale
        self.stream.backward(value, clock.step, micro, constant, where)

    def _fresh_constant(self, loss: torch.Tensor) -> bool:
        """A scalar the script made (``torch.tensor(3.0, requires_grad=True)``, maybe scaled)
        that no optimizer holds: its gradient reaches no parameter."""
        leaf = measure.scalar_leaf(loss)
        if leaf is None:
            return False
        return not any(leaf is p for opt in self.optimizers() for g in opt.param_groups for p in g["params"])

    # ---- clip ------------------------------------------------------------------------------------
    def on_clip(self, total_norm: Any, max_norm: float, step: int | None = None,
                via: str = "clip_grad_norm_", scale: torch.Tensor | None = None) -> None:
        """A clipping: the total norm before it and max_norm, at ``step`` (default: now; a
        framework that reports its norm after the optimizer stepped gives the step it took).
        ``scale``: the GradScaler scale the clipped gradients still carried."""
        if not isinstance(total_norm, torch.Tensor):
            total_norm = torch.tensor(float(total_norm))
        if scale is not None:  # a device op, no sync: the norm in the user's units
            total_norm = total_norm.detach() / scale.to(total_norm.device)
        where = user_site(2) if self.clock.measuring else ""
        if step is None:
            step = self.clock.current_step
        if total_norm.requires_grad:
            total_norm = total_norm.detach()
        self.stream.clip(total_norm, step, max_norm, where, via)


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
