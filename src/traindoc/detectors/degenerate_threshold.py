"""degenerate-threshold: F1 drops to exactly 0 (precision 0/0) while the model keeps learning."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import ClassVar, Iterable

from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar
from traindoc.findings import Finding

_PRECISION = ("metric.val_precision", "metric.eval_precision", "metric.precision",
              "metric.train_precision", "metric.valid_precision")


class DegenerateThreshold:
    """A thresholded F1 that had been positive falls to exactly 0 (or NaN: precision 0/0) and
    stays there for ``min_zeros`` evaluations, or until the run ends, while the training or
    validation loss is at least ``loss_drop`` below its start: the scores still move, but none
    crosses the threshold. An exact 0 (not 0.01) means no true positives at all, which for a
    model that is learning almost always means no positive predictions.

    An F1 that is 0 from the first evaluation on is not judged: an untrained model predicting
    nothing looks the same.
    """

    id: ClassVar[str] = "degenerate-threshold"
    needs: ClassVar[frozenset[str]] = frozenset({"val_f1"})
    uses: ClassVar[frozenset[str]] = frozenset({"train_f1", "loss", "val_loss", *_PRECISION})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("fixtures/logs/golden/degenerate_threshold.jsonl", 13),
        Example("fixtures/logs/golden/healthy_f1.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        min_zeros: int = 2
        loss_drop: float = 0.05
        smooth: int = 3

        def __post_init__(self) -> None:
            if self.min_zeros < 1:
                raise ValueError(f"min_zeros must be >= 1, got {self.min_zeros}")
            if not 0 <= self.loss_drop < 1:
                raise ValueError(f"loss_drop must be in [0, 1), got {self.loss_drop}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        n = self.config.smooth
        self._first: dict[str, list[float]] = {"loss": [], "val_loss": []}
        self._last: dict[str, deque[float]] = {"loss": deque(maxlen=n), "val_loss": deque(maxlen=n)}
        self._best: dict[str, tuple[int, float]] = {}  # f1 signal -> (step, best value)
        self._zeros: dict[str, list[int]] = {}  # f1 signal -> steps of the current zero stretch
        self._precision_nan: set[int] = set()
        self._fired: dict[str, tuple[int, str]] = {}  # f1 signal -> (step, learning evidence)

    def observe(self, event: Event) -> Iterable[Finding]:
        assert isinstance(event, Scalar)
        name, x = event.name, event.value
        if name in self._last:
            if math.isfinite(x):
                if len(self._first[name]) < self.config.smooth:
                    self._first[name].append(x)
                self._last[name].append(x)
            return ()
        if name in _PRECISION:
            if x != x:
                self._precision_nan.add(event.step)
            return ()
        if x == 0.0 or x != x:
            if name in self._best:  # it had been positive
                self._zeros.setdefault(name, []).append(event.step)
                if len(self._zeros[name]) >= self.config.min_zeros:
                    return self._fire(name)
            return ()
        self._zeros.pop(name, None)
        if math.isfinite(x) and x > 0 and (name not in self._best or x > self._best[name][1]):
            self._best[name] = (event.step, x)
        return ()

    def finish(self) -> Iterable[Finding]:
        # A zero stretch that lasts to the end counts even when shorter than min_zeros (seed 001:
        # early stopping ended the run on the first F1 of 0).
        for name in self._zeros:
            if self._zeros[name] and name not in self._fired:
                self._fire(name)
        return (self._finding(),) if self._fired else ()

    def _learning(self) -> str:
        for name in ("val_loss", "loss"):
            first, last = self._first[name], self._last[name]
            if len(first) < self.config.smooth or not last:
                continue
            start, now = median(first), median(list(last))
            if start > 0 and now <= (1 - self.config.loss_drop) * start:
                return f"{name} fell from {fmt(start)} to {fmt(now)} ({(now - start) / start:+.0%})"
        return ""

    def _fire(self, name: str) -> Iterable[Finding]:
        if name in self._fired:
            return ()
        learning = self._learning()
        if not learning:
            return ()
        self._fired[name] = (self._zeros[name][0], learning)
        return (self._finding(),)

    def _finding(self) -> Finding:
        parts, where = [], []
        first_step = min(step for step, _ in self._fired.values())
        for name, (step, learning) in self._fired.items():
            zeros = self._zeros.get(name) or [step]
            best_step, best = self._best[name]
            nan = sum(1 for s in zeros if s in self._precision_nan)
            prec = f", precision NaN (0/0) at {nan} of them" if nan else ""
            parts.append(
                f"{name} is exactly 0 at {len(zeros)} evaluation(s) from step {zeros[0]}{prec}, after "
                f"reaching {fmt(best)} at step {best_step}, while {learning}")
            where.append(name)
        return finding(
            self.id, step=first_step,
            message="; ".join(parts) + ": the scores still move, but none crosses the threshold.",
            evidence={"signals": where, "first_zero_step": first_step,
                      "best": {n: self._best[n][1] for n in where}},
            where=where,
        )
