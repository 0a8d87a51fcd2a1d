"""clipping-every-step: gradient clipping clips nearly every step by a large factor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import Thinned, median
from traindoc.events import Clip, Event
from traindoc.findings import Finding


class ClippingEveryStep(Detector):
    """Over at least ``min_calls`` calls, clip_grad_norm_ clipped on ``rate`` of them and the
    median norm was ``factor`` times max_norm or more: the clip, not the gradient, sets the
    update's length (SGD: lr * max_norm each step; Adam: the batches' weights in its moments).
    Past 1,024 calls the median is that of an even sample of them (the state stays bounded)."""

    id = "clipping-every-step"
    needs = frozenset({"clip"})
    examples = (
        Example("zoo/exploding_acyclicity.py", 0),
        Example("zoo/healthy_mlp.py", None),
        Example("fixtures/logs/csv/clipped_every_step.csv", 0, ("--max-norm", "1")),
        Example("fixtures/logs/csv/healthy.csv", None, ("--max-norm", "1")),
    )

    # Carried over a resume: the calls before it count towards min_calls.
    carry = ("_ratios", "_first", "_max_norm", "_where", "_via", "_fired", "_clipped", "_next_check")

    @dataclass(frozen=True)
    class Config:
        rate: float = 0.9
        factor: float = 5.0
        min_calls: int = 30

        def __post_init__(self) -> None:
            require(self, rate="(0, 1]")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._ratios = Thinned()  # norm / max_norm, a bounded sample spread over the run
        self._first: int | None = None
        self._max_norm = 0.0
        self._via = "clip_grad_norm_"  # what clipped, as the user wrote it
        self._where = ""
        self._fired = False
        self._clipped = 0
        self._next_check = self.config.min_calls

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, Clip)
        if event.max_norm <= 0:
            return
        if self._first is None:
            self._first = event.step
        self._max_norm, self._where, self._via = event.max_norm, event.where or self._where, event.via
        ratio = event.norm / event.max_norm
        self._ratios.append(ratio)
        self._clipped += ratio > 1.0
        # Judged at min_calls, then each time the count doubles (and at the end): a median
        # over every call on every call would be quadratic on a million-step log.
        if not self._fired and self._ratios.count >= self._next_check:
            self._next_check *= 2
            if self._bad():
                self._fired = True
                yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._fired or self._bad():
            yield self._finding()

    def _bad(self) -> bool:
        cfg = self.config
        n = self._ratios.count
        if n < cfg.min_calls or self._clipped < cfg.rate * n:
            return False
        return median(self._ratios.values) >= cfg.factor

    def _finding(self) -> Finding:
        n = self._ratios.count
        rate = self._clipped / n
        med = median(self._ratios.values)  # exact up to 1024 calls, then over an even sample
        return finding(
            self.id, step=self._first,
            message=(
                f"{self._via} (max_norm={fmt(self._max_norm)}) clipped {rate:.0%} of {n} calls; "
                f"the median gradient norm was {fmt(med)}x max_norm (thresholds: {self.config.rate:.0%} "
                f"of calls, {fmt(self.config.factor)}x)."
            ),
            fix=(
                f"Measure the unclipped norm (it is {fmt(med * self._max_norm)} here): if it is "
                "steady, raise max_norm to about its typical value so clipping only catches spikes; "
                "if it is huge, find the loss term or scale that makes it large (see "
                "exploding-gradients)."
            ),
            evidence={"clip_rate": rate, "median_ratio": med, "max_norm": self._max_norm, "calls": n},
            where=[self._where] if self._where else [],
        )
