"""LR schedules against the run's length: how much of each schedule the run took.

``LRScheduler.__init__`` is patched to note each scheduler whose horizon can be read
(OneCycleLR ``total_steps``, CosineAnnealingLR ``T_max``, PolynomialLR and a decaying LinearLR
``total_iters``, a LambdaLR built from a ``num_training_steps`` like transformers' warmup
schedules, SequentialLR's last milestone plus its last child's) and where it was built. Each
``step()`` of such a scheduler copies two numbers (its ``last_epoch`` and group 0's LR) into
that note, which holds no reference to the user's objects: the script's scheduler and
optimizer are usually gone when the run ends. The notes are reported when the probes are
removed.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from torch.optim import lr_scheduler as _sched

from traindoc.events import ScheduleEnd
from traindoc.live.objects import ObjectMap, user_site
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session


class ScheduleProbe(Probe):
    name = "schedule"
    signals = ("schedule",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._notes = ObjectMap()  # scheduler -> its _Note
        self._all: list[_Note] = []  # every note, in construction order (bounded)
        self._children: set[int] = set()  # ids of notes of SequentialLR children
        self._depth = 0

    def install(self) -> None:
        self._patch(_sched.LRScheduler, "__init__", self._wrap_init)
        hook = "_update_lr" if hasattr(_sched.LRScheduler, "_update_lr") else "step"  # torch < 2.6: step
        self._patch(_sched.LRScheduler, hook, self._wrap_step)

    def uninstall(self) -> None:
        for note in self._all:
            if id(note) not in self._children:  # a SequentialLR's child counts through its parent
                self.s.emit(ScheduleEnd(step=self.s.clock.current_step, scheduler=note.scheduler,
                                        optimizer=note.optimizer, taken=note.taken, horizon=note.horizon,
                                        attribute=note.attribute, lr_now=note.lr, lr_peak=note.peak,
                                        where=note.where))

    def _wrap_init(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def __init__(sched: Any, *args: Any, **kwargs: Any) -> None:
            probe._depth += 1  # a subclass's __init__ calls the base one: remember the outer one
            try:
                orig(sched, *args, **kwargs)
            finally:
                probe._depth -= 1
            if probe._depth == 0 and len(probe._all) < 16:
                probe._guard(probe.name, probe._note, sched)

        return __init__

    def _wrap_step(self, orig: Any) -> Any:
        notes = self._notes

        @functools.wraps(orig)
        def step(sched: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(sched, *args, **kwargs)
            note = notes.get(sched)
            if note is not None:  # two attribute reads: cannot raise for a scheduler we noted
                note.taken = int(sched.last_epoch)
                note.lr = float(sched.optimizer.param_groups[0]["lr"])
            return out

        return step

    def _note(self, sched: Any) -> None:
        found = horizon(sched)
        opt = getattr(sched, "optimizer", None)
        if found is None or opt is None or not opt.param_groups:
            return
        group = opt.param_groups[0]
        peak = float(group.get("max_lr", 0.0) or 0.0) or float(getattr(sched, "base_lrs", [math.nan])[0])
        note = _Note(type(sched).__name__, type(opt).__name__, found[0], found[1], peak, user_site(4))
        note.taken, note.lr = int(sched.last_epoch), float(group["lr"])
        self._notes[sched] = note
        self._all.append(note)
        for child in getattr(sched, "_schedulers", ()):
            if child in self._notes:
                self._children.add(id(self._notes.get(child)))


class _Note:
    __slots__ = ("scheduler", "optimizer", "horizon", "attribute", "peak", "where", "taken", "lr")

    def __init__(self, scheduler: str, optimizer: str, horizon: int, attribute: str, peak: float,
                 where: str) -> None:
        self.scheduler, self.optimizer, self.horizon, self.attribute = scheduler, optimizer, horizon, attribute
        self.peak, self.where = peak, where
        self.taken, self.lr = 0, math.nan


def horizon(sched: Any) -> tuple[int, str] | None:
    """The number of ``step()`` calls after which ``sched`` has run its course, and the
    attribute it was read from; None for open-ended schedules (StepLR, ExponentialLR,
    ReduceLROnPlateau, warm restarts, a LinearLR warmup)."""
    if isinstance(sched, _sched.OneCycleLR):
        return int(sched.total_steps) - 1, "total_steps"  # its last step is total_steps - 1
    if isinstance(sched, _sched.CosineAnnealingLR):
        return int(sched.T_max), "T_max"
    if isinstance(sched, _sched.PolynomialLR):
        return int(sched.total_iters), "total_iters"
    if isinstance(sched, _sched.LinearLR) and sched.end_factor <= 0.1:
        return int(sched.total_iters), "total_iters"
    if isinstance(sched, _sched.SequentialLR) and sched._schedulers:
        last = horizon(sched._schedulers[-1])
        if last is not None:
            return int(sched._milestones[-1]) + last[0], f"milestones + {last[1]}"
        return None
    if isinstance(sched, _sched.LambdaLR) and len(sched.lr_lambdas) >= 1:
        steps = _training_steps(sched.lr_lambdas[0])
        if steps is not None:
            return steps, "num_training_steps"
    return None


def _training_steps(fn: Any) -> int | None:
    """``num_training_steps`` of a warmup-decay lambda: a functools.partial keyword (current
    transformers) or a closure variable (older transformers, hand-written ones)."""
    keywords = getattr(fn, "keywords", None)
    if isinstance(keywords, dict) and isinstance(keywords.get("num_training_steps"), int):
        return int(keywords["num_training_steps"])
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is not None and cells:
        for name, cell in zip(code.co_freevars, cells):
            if name in ("num_training_steps", "total_steps", "max_steps"):
                try:
                    value = cell.cell_contents
                except ValueError:
                    return None
                return int(value) if isinstance(value, int) and value > 0 else None
    return None
