"""missing-zero-grad: gradients are never cleared between optimizer steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.events import Event, GradAccumulation
from traindoc.findings import Finding


class MissingZeroGrad(Detector):
    """On ``confirm`` consecutive sampled steps of one optimizer, its gradients were neither None
    nor zero before any backward() since its previous step: each step's first backward() added
    to the gradient the previous steps left (``carried`` > 0). Gradient accumulation is not this
    failure: it clears once per optimizer step, so the interval before each step starts from
    None or zero however many backward() calls it holds. When the optimizer's gradients are
    handed over from another model's (``fed_by``: A3C's local copy, a bf16 working copy), that
    model's gradients are the ones that must be cleared. Needs sampled steps (live)."""

    id = "missing-zero-grad"
    needs = frozenset({"accumulation"})
    examples = (
        Example("zoo/missing_zero_grad.py", 1),
        Example("zoo/manual_sgd_no_zero_grad.py", 1),
        Example("zoo/a3c_local_grads_accumulate.py", 2),
        Example("zoo/bf16_working_copy_no_zero_grad.py", 1),
        Example("zoo/healthy_a3c.py", None),
        Example("zoo/healthy_bf16_working_copy.py", None),
        Example("zoo/healthy_manual_sgd.py", None),
        Example("zoo/healthy_accumulation.py", None),
        Example("live/golden/missing_zero_grad.jsonl", 1),
        Example("live/golden/healthy_accumulation.jsonl", None),
    )

    # Carried over a resume: each optimizer's current run of uncleared steps (at most confirm) and
    # the run that fired, in its bounded summary.
    carry = ("_streak", "_fired", "_open")

    @dataclass(frozen=True)
    class Config:
        confirm: int = 3  # consecutive sampled steps without a clear

        def __post_init__(self) -> None:
            require(self, confirm=">= 2")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        # Per optimizer, its current run of uncleared steps: at most ``confirm`` long, since
        # the first to reach it fires and then runs are no longer needed.
        self._streak: dict[int, list[GradAccumulation]] = {}
        self._fired: _Run | None = None  # the run that fired, as long as it goes on
        self._open: int | None = None  # the optimizer whose uncleared run is still going on

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, GradAccumulation)
        e = event
        streak = self._streak.setdefault(e.optimizer, [])
        if e.cleared or not e.carried > 0:
            streak.clear()
            if self._open == e.optimizer:
                self._open = None
            return
        if self._fired is None:
            streak.append(e)
        if self._fired is not None and self._open == e.optimizer:
            if e.step == self._fired.last.step + 1:
                self._fired.add(e)  # the same run of steps goes on: refined at the end
            else:
                self._open = None  # a gap in the sampled steps: keep the evidence contiguous
        elif self._fired is None and len(streak) >= self.config.confirm:
            self._fired, self._open = _Run(streak), e.optimizer
            self._streak = {}
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._fired is not None:
            yield self._finding()

    def _finding(self) -> Finding:
        run = self._fired
        assert run is not None
        e, last = run.first, run.last
        at_step = list(run.norms)  # the gradient norm at the steps (the first 20)
        series = " -> ".join(fmt(x) for x in at_step[:8]) + (" ..." if run.normed > 8 else "")
        growth = run.last_norm / at_step[0] if run.normed >= 2 and at_step[0] > 0 else None
        where = f" at {e.where}" if e.where else ""
        steps = list(run.steps)
        whose = (f"the gradients {e.cls} steps with, handed over from {e.fed_by}'s .grad,"
                 if e.fed_by else f"the gradients of {e.cls}'s {e.params} parameters")
        return finding(
            self.id, step=e.step,
            message=(
                f"{whose} were not cleared between optimizer "
                f"steps on {run.count} sampled steps in a row ({steps[0]}-{last.step}): each step's "
                f"first backward() added to what the previous steps left (gradient norm "
                f"{fmt(e.carried)} carried into step {e.step}), and the gradient norm at the steps "
                f"grew {series}" + (f" ({fmt(growth)}x)" if growth else "") + (
                f". {e.cls}.zero_grad() ran, but nothing cleared {e.fed_by}'s gradients "
                if e.fed_by else ". No zero_grad(), set-to-None or zeroing ran ") + "in between (threshold: "
                f"{self.config.confirm} steps)."
            ),
            cause=(
                f"{e.cls}.zero_grad() clears only the .grad of the parameters it holds, not "
                f"{e.fed_by}'s, where each backward() adds its gradients (since torch 2.0 it sets "
                "them to None, so a gradient tensor shared by assignment is no longer zeroed in "
                "place either). Each step then applies the sum of all gradients so far: the update "
                "follows old batches instead of the current one." if e.fed_by else
                f"optimizer.zero_grad() is missing from the loop, runs on another optimizer or "
                f"module than the one stepped ({e.cls}), sits in a branch that rarely runs, or is "
                "placed after the loop. Each step then applies the sum of all gradients so far: "
                "the update grows every step and follows old batches instead of the current one."
            ),
            fix=(
                f"Clear {e.fed_by}'s gradients before each backward(): `{e.fed_by}.zero_grad()` "
                f"(or after the gradients are handed to {e.cls}{where})." if e.fed_by else
                f"Clear once per optimizer step, right after {e.cls}.step(){where}: "
                "`optimizer.zero_grad()` (sets .grad to None). With gradient accumulation, clear "
                "after the step that closes the micro-batches; with several optimizers, clear each "
                "one or call model.zero_grad()."
            ),
            evidence={
                "optimizer": e.cls, "parameters": e.params, "consecutive_steps": run.count,
                "steps": steps, "carried_norm": e.carried,
                "grad_norm_at_steps": at_step, "backwards_per_step": last.backwards,
                **({"handed_over_from": e.fed_by} if e.fed_by else {}),
            },
            where=[e.where] if e.where else [],
        )


class _Run:
    """Consecutive sampled steps without a clear, bounded however long they go on: the first and
    the last, how many, the first 20 steps, and the gradient norm at the steps (the first 20,
    the last, how many)."""

    def __init__(self, streak: list[GradAccumulation]) -> None:
        self.first = self.last = streak[0]
        self.count = self.normed = 0
        self.steps: list[int] = []
        self.norms: list[float] = []
        self.last_norm = 0.0
        for e in streak:
            self.add(e)

    def add(self, e: GradAccumulation) -> None:
        self.last = e
        self.count += 1
        if len(self.steps) < 20:
            self.steps.append(e.step)
        if e.norms:
            self.normed += 1
            self.last_norm = e.norms[-1]
            if len(self.norms) < 20:
                self.norms.append(e.norms[-1])
