"""The training loop's order: LR schedulers against optimizer steps, and the LR per step.

Scheduler order: ``LRScheduler._update_lr``, which every ``LRScheduler.step`` calls after its
own order check, is patched rather than ``step`` itself, so that PyTorch's warning (issued in
``step`` with stacklevel=2) still points at the user's line. SequentialLR and ChainedScheduler
override ``step`` and step their children, which are seen with their own class.
``ReduceLROnPlateau`` is an LRScheduler subclass in torch 2.x but overrides ``step(metrics)``
without calling the base class and is left out on purpose: it is driven by a metric, has no
schedule whose first value could be skipped, and is often stepped by an evaluation before
training. A scheduler's construction-time step is not the user's and is ignored. A call
before its optimizer's first ``step()`` is "early"; if an AMP GradScaler skipped that
optimizer's step (``scaler.step(opt)`` was called but found Inf/NaN), the call is counted as
``skipped``: PyTorch warns there too, but the user's order is right.
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import Any

import torch
from torch.optim import lr_scheduler as _sched

from traindoc.events import Scalar, SchedulerStep
from traindoc.live.probes._patch import Patcher, is_traced
from traindoc.live.probes.base import Probe
from traindoc.live.objects import ObjectMap, user_site
from traindoc.live.session import Session

def lr0(opt: Any) -> float:
    """Parameter group 0's LR as a float, NaN when it is an accelerator tensor (no sync)."""
    try:
        lr = opt.param_groups[0]["lr"]
    except (AttributeError, IndexError, KeyError, TypeError):
        return math.nan
    if isinstance(lr, torch.Tensor):
        return float(lr) if lr.device.type == "cpu" and lr.numel() == 1 else math.nan
    try:
        return float(lr)
    except (TypeError, ValueError):
        return math.nan


class _Early:
    """A scheduler's calls before its optimizer's first step."""

    __slots__ = ("scheduler", "optimizer", "opt_ref", "early", "skipped", "lr_start", "lr_after", "where")

    def __init__(self, sched: Any, opt: Any, where: str) -> None:
        self.scheduler = type(sched).__name__
        self.optimizer = type(opt).__name__
        self.opt_ref = weakref.ref(opt)
        self.early = 0
        self.skipped = 0
        self.lr_start = lr0(opt)
        self.lr_after = math.nan
        self.where = where


class LoopProbes(Probe):
    name = "loop"
    signals = ("scheduler", "lr")

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._sched_depth = 0
        # scheduler order
        # Keyed by identity, ignoring dead objects (Python reuses ids).
        self._stepped = ObjectMap()  # optimizers that have stepped
        self._scaler_tried = ObjectMap()  # optimizers passed to GradScaler.step
        self._early = ObjectMap()  # scheduler -> _Early
        self._sched_done = ObjectMap()  # schedulers whose order is settled
        # The optimizer of the last step (weak): the common case of every step skips a lookup.
        self._last_opt: Any = lambda: None

    # ---- install / uninstall -----------------------------------------------------------------
    def install(self) -> None:
        self._patcher.on_step("loop", post=self._post_step)
        hook = "_update_lr" if hasattr(_sched.LRScheduler, "_update_lr") else "step"  # torch < 2.6: step
        self._patch(_sched.LRScheduler, hook, self._wrap_sched_step)
        scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if scaler is not None:
            self._patch(scaler, "step", self._wrap_scaler_step)

    def uninstall(self) -> None:
        # Schedulers whose optimizer never stepped: report what was seen.
        for sched, _ in self._early.items():
            self._guard("scheduler", self._emit_early, sched, math.nan)

    # ---- scheduler order -----------------------------------------------------------------------
    def _wrap_sched_step(self, orig: Any) -> Any:
        probes = self

        @functools.wraps(orig)
        def step(sched: Any, *args: Any, **kwargs: Any) -> Any:
            if probes._sched_depth or sched in probes._sched_done:
                return orig(sched, *args, **kwargs)  # a child of Sequential/Chained, or settled
            probes._sched_depth += 1
            try:
                probes._guard("scheduler", probes._before_sched, sched)
                out = orig(sched, *args, **kwargs)
            finally:
                probes._sched_depth -= 1
            probes._guard("scheduler", probes._after_sched, sched)
            return out

        return step

    def _before_sched(self, sched: Any) -> None:
        if getattr(sched, "_is_initial", False) or getattr(sched, "_step_count", 1) == 0:
            return  # the step every scheduler takes in its constructor
        opt = getattr(sched, "optimizer", None)
        if opt is None:
            return
        if opt in self._stepped or getattr(opt, "_opt_called", False):
            if sched not in self._early:
                self._sched_done[sched] = True
                self.s.emit(SchedulerStep(step=self.s.clock.step, scheduler=type(sched).__name__,
                                          optimizer=type(opt).__name__))
            return
        rec = self._early.get(sched)
        if rec is None:
            rec = _Early(sched, opt, user_site(2))
            self._early[sched] = rec
        rec.early += 1
        if opt in self._scaler_tried:
            rec.skipped += 1

    def _after_sched(self, sched: Any) -> None:
        rec = self._early.get(sched)
        if rec is not None:
            rec.lr_after = lr0(rec.opt_ref())

    def _emit_early(self, sched: Any, lr_first: float) -> None:
        rec = self._early.pop(sched)
        self._sched_done[sched] = True
        self.s.emit(SchedulerStep(
            step=self.s.clock.step, scheduler=rec.scheduler, optimizer=rec.optimizer, early=rec.early,
            skipped=rec.skipped, lr_start=rec.lr_start, lr_after=rec.lr_after, lr_first=lr_first,
            where=rec.where,
        ))

    def _wrap_scaler_step(self, orig: Any) -> Any:
        probes = self

        @functools.wraps(orig)
        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if optimizer not in probes._scaler_tried:
                probes._guard("scheduler", probes._scaler_tried.__setitem__, optimizer, True)
            return orig(scaler, optimizer, *args, **kwargs)

        return step

    # ---- optimizer steps -----------------------------------------------------------------------
    def _post_step(self, opt: Any) -> None:
        if self.s.setup_step:  # not a training step (Session.setup_step)
            return
        if opt is not self._last_opt():
            if opt not in self._stepped:
                self._guard("scheduler", self._first_step, opt)
            self._last_opt = weakref.ref(opt)
        if self.s.clock.sampled and not is_traced():
            self._guard("lr", self._emit_lr, opt)

    def _first_step(self, opt: Any) -> None:
        self._stepped[opt] = True
        lr = lr0(opt)
        for sched, rec in self._early.items():
            if rec.opt_ref() is opt:
                self._emit_early(sched, lr)

    def _emit_lr(self, opt: Any) -> None:
        if self.s.optimizer_index(opt) != 0:
            return  # the LR series follows the first optimizer
        lr = lr0(opt)
        if math.isfinite(lr):
            self.s.emit(Scalar(step=self.s.clock.step, name="lr", value=lr))
