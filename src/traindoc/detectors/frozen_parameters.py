"""frozen-parameters: trainable parameters that stay at their initial values all run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, names
from traindoc.events import Event, Optimizer, ParamStats
from traindoc.findings import Finding


class FrozenParameters(Detector):
    """Parameters with requires_grad, held by an optimizer and receiving gradients, whose sampled
    elements never moved from their first value over at least ``min_steps`` steps. (Parameters
    with no gradient at all are no-gradient.) Judged at the end of the run."""

    id = "frozen-parameters"
    needs = frozenset({"params"})
    uses = frozenset({"optimizer"})
    examples = (
        Example("zoo/frozen_temperature.py", 0),
        Example("demo_scripts/bf16_master.py", 0),
        Example("ckpt/golden/bf16_norms_frozen_diff.jsonl", 1),
        Example("ckpt/golden/tiny_lr_diff.jsonl", None),
        Example("zoo/healthy_finetune.py", None),
    )

    # Carried over a resume: which parameters got gradients and how far each moved, their optimizer
    # groups' LRs and the span of steps (judged at the end over the whole run).
    carry = ("_lr", "_opt", "_info", "_moved", "_graded", "_first_step", "_last_step", "_diff")

    @dataclass(frozen=True)
    class Config:
        min_steps: int = 10

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._lr: dict[tuple[int, int], float] = {}
        self._opt: dict[int, str] = {}
        self._info: dict[str, tuple[int, int, str, int]] = {}  # name -> (opt, group, dtype, first step)
        self._moved: dict[str, float] = {}
        self._graded: set[str] = set()
        self._first_step: int | None = None
        self._last_step = 0
        self._diff = False

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Optimizer):
            self._opt[event.index] = event.cls
            for g in event.groups:
                self._lr[(event.index, g.index)] = g.lr
            return iter(())
        assert isinstance(event, ParamStats)
        if event.optimizer < 0 or not event.requires_grad or event.moved is None:
            return iter(())
        # An event spans the steps (step - steps, step]: one optimizer step live, the steps
        # between two checkpoints in a diff (where gradients are unknown: has_grad None).
        start = event.step - event.steps + 1
        self._first_step = start if self._first_step is None else min(self._first_step, start)
        self._last_step = max(self._last_step, event.step)
        self._diff = self._diff or event.has_grad is None
        self._info.setdefault(event.name, (event.optimizer, event.group, event.dtype, max(start, 0)))
        self._moved[event.name] = max(self._moved.get(event.name, 0.0), event.moved)
        if event.has_grad is None or (event.has_grad and event.grad):
            self._graded.add(event.name)
        return iter(())

    def finish(self) -> Iterator[Finding]:
        span = self._last_step - (self._first_step or 0) + 1
        if self._diff:  # a checkpoint diff: frozen means bit-identical while others moved
            if not any(v > 0 for v in self._moved.values()):
                return
        elif span < self.config.min_steps:
            return
        frozen = [n for n in self._info if n in self._graded and self._moved.get(n, 0.0) == 0.0]
        if not frozen:
            return
        zero_lr = [n for n in frozen if self._lr.get(self._info[n][:2]) == 0.0]
        low = [n for n in frozen if self._info[n][2] in ("torch.bfloat16", "torch.float16")]
        if zero_lr:
            cause = (f"Their parameter group's learning rate is 0 ({names(zero_lr, 3)}): a config "
                     "default of 0, or a schedule that multiplies the LR by 0.")
            fix = "Give that group a real LR (and check the schedule's first values)."
        elif low:
            cause = ("They are stored in low precision and every update rounds away (see "
                     "update-underflow): at |w| = 1.0 the bf16 spacing is 0.0078.")
            fix = ("Keep fp32 parameters and use torch.autocast for the forward; do not cast the "
                   "model with .to(torch.bfloat16).")
        else:
            cause = ("Their updates are exactly zero" + ("" if self._diff else " although they receive gradients")
                     + ": an LR of 0, a parameter left out of the optimizer or skipped by it, a "
                     "weight decay and momentum that cancel, or no gradient reaching them.")
            fix = "Print the LR and state of their optimizer group; check the scheduler's values."
        yield finding(
            self.id, step=min(self._info[n][3] for n in frozen),
            message=(
                f"{len(frozen)} trainable parameter(s) never moved from their initial values over "
                f"{span} steps" + (" between the two checkpoints while other parameters did" if self._diff
                                   else " although they receive gradients")
                + f" (max |w - w0| = 0): {names(frozen)}."
            ),
            cause=cause, fix=fix,
            evidence={"parameters": frozen[:50], "count": len(frozen), "steps": span,
                      "zero_lr": zero_lr[:20], "low_precision": low[:20],
                      "distance_from_init": {n: self._moved.get(n, 0.0) for n in frozen[:20]}},
            where=frozen[:10],
        )
