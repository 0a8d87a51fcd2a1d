"""divergence: the loss grows by orders of magnitude or heads to NaN."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import ClassVar, Iterator

from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar
from traindoc.findings import Finding


class Divergence:
    """The smoothed loss (median of the last ``smooth`` values) rises to ``factor`` times its
    best so far and above its initial level, or the loss turns NaN/Inf after rising
    ``nan_rise`` times above its best. Comparing with the initial level too keeps a loss that
    wobbles near zero at the end of training from firing."""

    id: ClassVar[str] = "divergence"
    needs: ClassVar[frozenset[str]] = frozenset({"loss"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("zoo/divergence.py", -1),
        Example("golden/diverging_loss.jsonl", 18),
        Example("golden/healthy_noisy_loss.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        factor: float = 10.0
        above_initial: float = 2.0
        nan_rise: float = 10.0
        smooth: int = 5

        def __post_init__(self) -> None:
            if self.factor <= 1:
                raise ValueError(f"factor must be > 1, got {self.factor}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._recent: deque[float] = deque(maxlen=self.config.smooth)
        self._initial: float | None = None
        self._best = math.inf
        self._best_step = 0
        self._last = math.nan
        self._peak = -math.inf
        self._fired: tuple[int, float, str] | None = None

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, Scalar)
        if self._fired:
            if len(self._recent) == self.config.smooth and math.isfinite(event.value):
                self._recent.append(event.value)
                self._peak = max(self._peak, median(list(self._recent)))
            return
        cfg = self.config
        if not math.isfinite(event.value):
            if self._initial is not None and self._last >= cfg.nan_rise * self._best > 0:
                self._fired = (event.step, event.value, "turned non-finite after rising")
                yield self._finding(*self._fired)
            return
        self._recent.append(event.value)
        if len(self._recent) < cfg.smooth:
            return
        smooth = median(list(self._recent))
        self._last = smooth
        if self._initial is None:
            self._initial = smooth
        if smooth < self._best:
            self._best, self._best_step = smooth, event.step
        self._peak = max(self._peak, smooth)
        if self._best > 0 and smooth >= cfg.factor * self._best and smooth >= cfg.above_initial * self._initial:
            self._fired = (event.step, smooth, "rose")
            yield self._finding(*self._fired)

    def finish(self) -> Iterator[Finding]:
        if self._fired:  # the same finding, now with the run's peak in the evidence
            yield self._finding(*self._fired)

    def _finding(self, step: int, value: float, how: str) -> Finding:
        ratio = value / self._best if self._best > 0 and math.isfinite(value) else math.inf
        return finding(
            self.id, step=step,
            message=(
                f"the loss {how} to {fmt(value)} at step {step}: {fmt(ratio)}x its best "
                f"({fmt(self._best)} at step {self._best_step}) and against {fmt(self._initial or 0)} at "
                f"the start (threshold {fmt(self.config.factor)}x the best); it peaked at {fmt(self._peak)}."
            ),
            cause=(
                "The LR is above the stability limit for this loss and model (or rose with the "
                "schedule), a loss term blows up, or the data scale is off; each update overshoots "
                "and makes the next gradient larger."
            ),
            fix=(
                "Lower the LR (by 3-10x) or add warmup; clip gradients; normalize inputs and "
                "targets; if it started after some progress, check the schedule and the batches at "
                "that step."
            ),
            evidence={"loss": value, "peak": self._peak, "best": self._best, "best_step": self._best_step,
                      "initial": self._initial, "ratio": ratio, "threshold": self.config.factor},
        )
