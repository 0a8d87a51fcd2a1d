"""degenerate-threshold: F1 drops to exactly 0 (precision 0/0) while the model keeps learning."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import ClassVar, Iterable, Mapping

from traindoc.detectors import _carry
from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar
from traindoc.findings import EvidenceValue, Finding

_PRECISION = ("metric.val_precision", "metric.eval_precision", "metric.precision",
              "metric.train_precision", "metric.valid_precision")
# Measured live from the evaluation's binary loss calls (live/probes/eval_metrics.py).
_SCORES = ("val_pos_rate", "val_base_rate", "val_max_score")


# What carries over a resume (Engine.state_dict): the first and latest losses, each F1's best and
# current stretch of zeros (one entry per evaluation), and the measured scores of the latest
# evaluations.
_CARRIED = ("_first", "_last", "_best", "_zeros", "_precision_nan", "_fired", "_scores",
            "_none_cross", "_latest")


class DegenerateThreshold:
    """A thresholded F1 that had been positive falls to exactly 0 (or NaN: precision 0/0) and
    stays there for ``min_zeros`` evaluations, or until the run ends, while the training or
    validation loss is at least ``loss_drop`` below its start: the scores still move, but none
    crosses the threshold. An exact 0 (not 0.01) means no true positives at all, which for a
    model that is learning almost always means no positive predictions.

    An F1 that is 0 from the first evaluation on is judged only when the evaluation's scores
    were measured (live: ``val_pos_rate``, the share of the binary loss's scores above 0.5, and
    ``val_base_rate``, the share of positive targets): ``val_f1`` is 0 at ``min_zeros``
    evaluations and at ``min_zeros`` evaluations in a row no score crossed 0.5 while some
    targets were positive, as the loss falls. Without that measurement an untrained model
    predicting nothing looks the same, and it stays quiet.
    """

    id: ClassVar[str] = "degenerate-threshold"
    needs: ClassVar[frozenset[str]] = frozenset({"val_f1"})
    uses: ClassVar[frozenset[str]] = frozenset({"train_f1", "loss", "val_loss", *_PRECISION, *_SCORES})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("fixtures/logs/golden/degenerate_threshold.jsonl", 13),
        Example("live_eval_metrics/golden/degenerate_threshold_sparse.jsonl", 60),
        Example("zoo/degenerate_threshold_sparse.py", 60),
        Example("fixtures/logs/golden/healthy_f1.jsonl", None),
        Example("live_eval_metrics/golden/healthy_sparse_threshold.jsonl", None),
        Example("zoo/healthy_sparse_threshold.py", None),
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
        # Measured scores (live): the evaluation at a step -> its val_pos_rate, val_base_rate,
        # val_max_score; the steps of the current stretch where none crossed 0.5.
        self._scores: dict[int, dict[str, float]] = {}
        self._none_cross: list[int] = []
        self._latest: dict[str, float] = {}

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``_CARRIED``)."""
        return _carry.save(self, _CARRIED)

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        _carry.load(self, state, _CARRIED)

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
        if name in _SCORES:
            return self._scored(event.step, name, x)
        if x == 0.0 or x != x:
            self._zeros.setdefault(name, []).append(event.step)
            if self._ready(name):
                return self._fire(name)
            return ()
        self._zeros.pop(name, None)
        if math.isfinite(x) and x > 0 and (name not in self._best or x > self._best[name][1]):
            self._best[name] = (event.step, x)
        return ()

    def finish(self) -> Iterable[Finding]:
        # A zero stretch that lasts to the end counts even when shorter than min_zeros (seed 001:
        # early stopping ended the run on the first F1 of 0).
        for name in list(self._zeros):
            if self._ready(name, at_end=True):
                self._fire(name)
        return (self._finding(),) if self._fired else ()

    def _scored(self, step: int, name: str, x: float) -> Iterable[Finding]:
        """One measured number of the evaluation at ``step``; once its share above 0.5 and its
        share of positive targets are both in, the no-crossing stretch moves on."""
        if not math.isfinite(x):
            return ()
        got = self._scores.setdefault(step, {})
        got[name] = x
        self._latest[name] = x
        if len(self._scores) > 8:
            del self._scores[min(self._scores)]
        if name == "val_max_score" or "val_pos_rate" not in got or "val_base_rate" not in got \
                or got.get("counted"):
            return ()
        got["counted"] = 1.0
        if got["val_pos_rate"] > 0:
            self._none_cross = []
        elif got["val_base_rate"] > 0:
            self._none_cross.append(step)
        if self._ready("val_f1"):
            return self._fire("val_f1")
        return ()

    def _ready(self, name: str, at_end: bool = False) -> bool:
        zeros = self._zeros.get(name)
        if not zeros or name in self._fired:
            return False
        if name in self._best:  # it had been positive
            return at_end or len(zeros) >= self.config.min_zeros
        # 0 from the start: only with the scores measured, and only for the evaluation's F1.
        return (name == "val_f1" and len(zeros) >= self.config.min_zeros
                and len(self._none_cross) >= self.config.min_zeros)

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

    def _crossing(self) -> str:
        """What the measured scores say, "" when they were not measured."""
        if not self._none_cross:
            return ""
        top = self._latest.get("val_max_score")
        highest = f"highest {fmt(top)}; " if top is not None else ""
        base = self._latest.get("val_base_rate", 0.0)
        return (f"; no score of the evaluation crossed 0.5 at {len(self._none_cross)} evaluation(s) "
                f"from step {self._none_cross[0]} ({highest}{base:.1%} of its targets positive)")

    def _finding(self) -> Finding:
        parts, where = [], []
        first_step = min(step for step, _ in self._fired.values())
        crossing = self._crossing()
        for name, (step, learning) in self._fired.items():
            zeros = self._zeros.get(name) or [step]
            nan = sum(1 for s in zeros if s in self._precision_nan)
            prec = f", precision NaN (0/0) at {nan} of them" if nan else ""
            if name in self._best:
                best_step, best = self._best[name]
                before = f", after reaching {fmt(best)} at step {best_step}"
            else:
                before = ", from the first evaluation on"
            parts.append(
                f"{name} is exactly 0 at {len(zeros)} evaluation(s) from step {zeros[0]}{prec}{before}"
                f"{crossing}, while {learning}")
            where.append(name)
        evidence: dict[str, EvidenceValue] = {
            "signals": where, "first_zero_step": first_step,
            "best": {n: self._best[n][1] for n in where if n in self._best},
        }
        if self._none_cross:
            evidence.update(threshold=0.5, evaluations_none_above=len(self._none_cross),
                            share_above=self._latest.get("val_pos_rate"),
                            base_rate=self._latest.get("val_base_rate"),
                            max_score=self._latest.get("val_max_score"))
        return finding(
            self.id, step=first_step,
            message="; ".join(parts) + ": the scores still move, but none crosses the threshold.",
            evidence=evidence,
            where=where,
        )
