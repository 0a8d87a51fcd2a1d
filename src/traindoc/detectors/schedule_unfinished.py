"""schedule-unfinished: the run ended with its LR schedule far from its end."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.events import Event, RunEnd, Scalar, ScheduleEnd, StateLoad
from traindoc.findings import Finding


class ScheduleUnfinished(Detector):
    """A run that ended normally (not a crash, not Ctrl-C) with an LR schedule at under
    ``done`` of its horizon: the loop's step budget and the schedule's were computed
    differently (floor against ceil with gradient accumulation, per-epoch stepping of a
    per-step schedule), so training stopped before the LR annealed. When the validation loss
    had stopped improving for ``patience`` evaluations before the end, the stop looks like the
    script's own early stopping: said as info, not a warning.

    A preempted job that resumes in the same process (a driver relaunching its training
    function after each time slice) builds one scheduler per launch at the same site and loads
    the predecessor's state into it (``scheduler.load_state_dict``): the launches continue one
    schedule. A scheduler is judged as continued, not unfinished, when a scheduler state of its
    class was loaded in the run and a later-built scheduler of the same class, optimizer class
    and horizon went further; the last of such a chain is judged as any other (a resumed run
    whose step budget still stops short fires). A resumed run in its own process needs nothing:
    the loaded ``last_epoch`` already counts the predecessor's steps."""

    id = "schedule-unfinished"
    needs = frozenset({"schedule"})
    uses = frozenset({"end", "val_loss", "load"})
    examples = (
        Example("zoo/schedule_unfinished_accumulation.py", 16),
        Example("zoo/healthy_accumulation_budget.py", None),
        Example("zoo/healthy_early_stopping.py", None),
        Example("zoo/healthy_preempted_resume.py", None),
        Example("zoo/preempted_resume_short_budget.py", 150),
    )

    # Carried over a resume: the best validation loss and the evaluations since (an early stop is
    # judged on the whole run); the schedule's end and the run's status come at the end.
    carry = ("_best", "_since_best", "_evals")

    @dataclass(frozen=True)
    class Config:
        done: float = 0.9  # share of the horizon below which a schedule is unfinished
        patience: int = 3  # evaluations without improvement that look like early stopping

        def __post_init__(self) -> None:
            require(self, done="(0, 1]", patience=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._ends: list[ScheduleEnd] = []
        self._status = ""
        self._best: float | None = None
        self._since_best = 0  # evaluations since the best validation loss
        self._evals = 0
        self._loaded: set[str] = set()  # classes of the schedulers whose state was loaded

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, ScheduleEnd):
            self._ends.append(event)
        elif isinstance(event, StateLoad):
            if event.target == "scheduler":
                self._loaded.add(event.cls)
        elif isinstance(event, RunEnd):
            self._status = event.status
        elif isinstance(event, Scalar) and event.name == "val_loss":
            self._evals += 1
            if self._best is None or event.value < self._best * (1 - 1e-3):
                self._best, self._since_best = event.value, 0
            else:
                self._since_best += 1
        return iter(())

    def finish(self) -> Iterator[Finding]:
        if self._status not in ("ok", "exit"):
            return  # a crash or an interrupt: the run did not end on its own terms
        for i, e in enumerate(self._ends):
            # a peak LR of 0: the schedule anneals nothing, so cutting it short changes nothing
            if e.horizon > 0 and e.lr_peak > 0 and e.taken < self.config.done * e.horizon and not self._continued(i):
                yield self._finding(e)

    def _continued(self, i: int) -> bool:
        """Scheduler ``i``'s state went on in a successor: a scheduler of its class was loaded
        and one built after it (the ends come in construction order) for the same optimizer
        class and horizon took more steps."""
        e = self._ends[i]
        return e.scheduler in self._loaded and any(
            f.scheduler == e.scheduler and f.optimizer == e.optimizer and f.horizon == e.horizon
            and f.attribute == e.attribute and f.taken > e.taken for f in self._ends[i + 1:])

    def _finding(self, e: ScheduleEnd) -> Finding:
        stopped = self._evals > self.config.patience and self._since_best >= self.config.patience
        share = e.taken / e.horizon
        message = (
            f"The run ended after {e.taken} of the {e.horizon} steps {e.scheduler} "
            f"(built at {e.where or 'an unknown site'}) was scheduled for ({e.attribute}), "
            f"{share:.0%} of it: {e.optimizer}'s LR is {fmt(e.lr_now)}, "
            f"{e.lr_now / e.lr_peak:.0%} of its peak {fmt(e.lr_peak)}, where the schedule "
            "would have annealed it."
        )
        if stopped:
            message += (f" The validation loss had not improved for the last {self._since_best} "
                        "evaluations: the script stopped early on purpose.")
        f = finding(
            self.id, step=e.step, message=message,
            fix=(f"Compute the loop's step budget and {e.scheduler}'s {e.attribute} from the same "
                 "number: the optimizer steps the loop really takes (with gradient accumulation, "
                 "ceil(len(loader) / accum) per epoch when the last partial window steps too), "
                 "and step the scheduler once per optimizer step if it was sized in steps."),
            evidence={"scheduler": e.scheduler, "taken": e.taken, "horizon": e.horizon,
                      "attribute": e.attribute, "lr_now": e.lr_now, "lr_peak": e.lr_peak,
                      "early_stopping": stopped},
            where=[e.where] if e.where else [],
        )
        return dataclasses.replace(f, severity="info") if stopped else f
