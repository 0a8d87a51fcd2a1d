"""degenerate-threshold: a thresholded metric (F1, precision, recall) is exactly 0 while the model
keeps learning."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Iterable

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar
from traindoc.events.metrics import thresholded_metric
from traindoc.findings import EvidenceValue, Finding

_PRECISION = ("metric.val_precision", "metric.eval_precision", "metric.precision",
              "metric.train_precision", "metric.valid_precision")
# Measured live from the evaluation's binary loss calls (src/traindoc/live/probes/eval_metrics.py).
_SCORES = ("val_pos_rate", "val_base_rate", "val_max_score")


# The held-out F1 printed as "test" (the MNIST-example shape: a test() after every epoch) is
# judged as the validation F1 is.
_F1 = ("val_f1", "train_f1", "metric.test_f1")


class DegenerateThreshold(Detector):
    """A thresholded F1 that had been positive falls to exactly 0 (or NaN: precision 0/0) and
    stays there for ``min_zeros`` evaluations, or until the run ends, while the training or
    validation loss is at least ``loss_drop`` below its start: the scores still move, but none
    crosses the threshold. An exact 0 (not 0.01) means no true positives at all, which for a
    model that is learning almost always means no positive predictions.

    A metric that is exactly 0 at every evaluation of the run, never positive, at
    ``never_evals`` evaluations or more while the loss fell at least ``never_drop`` below its
    start, fires at the end: a model that learns for that long and never once predicts a true
    positive has a threshold no score crosses (seed 001's ``Val F1 = 0.0000``). A healthy run
    whose F1 is 0 for the first evaluation or two and then rises stays quiet, and so does a run
    whose loss does not fall (an untrained model predicting nothing looks the same). When the
    evaluation's scores were measured (live: ``val_pos_rate``, the share of the binary loss's
    scores above 0.5, and ``val_base_rate``, the share of positive targets), ``val_f1`` fires
    sooner, at ``min_zeros`` evaluations in a row where no score crossed 0.5 while some targets
    were positive, as the loss falls.

    Besides ``val_f1``, ``train_f1`` and ``metric.test_f1`` (an F1 printed or logged for a
    "test" split), it judges the same way every metric whose name reads as a precision, recall
    or F-score (``metric.val_recall``, ``metric.valid_precision_macro``), whichever face saw it,
    and those ``watch`` names.
    """

    id = "degenerate-threshold"
    needs = frozenset({"val_f1"})
    uses = frozenset({"train_f1", "metric.test_f1", "loss", "val_loss", *_PRECISION,
                                                *_SCORES})
    examples = (
        Example("fixtures/logs/golden/degenerate_threshold.jsonl", 13),
        Example("live_eval_metrics/golden/degenerate_threshold_sparse.jsonl", 60),
        Example("zoo/degenerate_threshold_sparse.py", 60),
        Example("zoo/gnn_link_f1_printed.py", 10),
        Example("zoo/fraud_f1_at_threshold_printed.py", 40),
        Example("fixtures/logs/meaning/f1_zero_from_start.csv", 0),
        Example("fixtures/logs/meaning/recall_zero_from_start.jsonl", 100),
        Example("fixtures/logs/golden/healthy_f1.jsonl", None),
        Example("fixtures/logs/meaning/healthy_f1_late_start.csv", None),
        Example("fixtures/logs/meaning/f1_zero_loss_flat.jsonl", None),
        Example("live_eval_metrics/golden/healthy_sparse_threshold.jsonl", None),
        Example("zoo/healthy_sparse_threshold.py", None),
        Example("zoo/healthy_gnn_link_f1_printed.py", None),
        Example("zoo/healthy_fraud_f1_best_threshold.py", None),
    )

    # Carried over a resume: the first and latest losses, each F1's best and current stretch of
    # zeros (one entry per evaluation), its evaluations and exact zeros, and the measured scores of
    # the latest evaluations.
    carry = ("_first", "_last", "_best", "_zeros", "_precision_nan", "_fired", "_scores",
                "_none_cross", "_latest", "_evals", "_exact")

    @dataclass(frozen=True)
    class Config:
        min_zeros: int = 2
        loss_drop: float = 0.05
        smooth: int = 3
        never_evals: int = 5  # a metric 0 at every evaluation: at least this many of them ...
        never_drop: float = 0.2  # ... while the loss fell this share below its start
        watch: tuple[str, ...] = ()  # other thresholded metrics, e.g. "metric.val_recall"

        def __post_init__(self) -> None:
            object.__setattr__(self, "watch", tuple(self.watch))  # a TOML list is fine too
            require(self, min_zeros=">= 1", never_evals=">= 2", loss_drop="[0, 1)", never_drop="[0, 1)")

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
        self._evals: dict[str, int] = {}  # metric -> evaluations seen
        self._exact: dict[str, int] = {}  # metric -> evaluations at exactly 0 (not NaN)

    def reads(self, signal: str) -> bool:
        return signal in self.config.watch or thresholded_metric(signal)

    def observe(self, event: Event) -> Iterable[Finding]:
        assert isinstance(event, Scalar)
        name, x = event.name, event.value
        if name in self._last:
            if math.isfinite(x):
                if len(self._first[name]) < self.config.smooth:
                    self._first[name].append(x)
                self._last[name].append(x)
            return ()
        if name in _PRECISION and x != x:
            self._precision_nan.add(event.step)
        if name in _SCORES:
            return self._scored(event.step, name, x)
        if name not in _F1 and not self.reads(name):  # reads: watch, and names of thresholded metrics
            return ()
        self._evals[name] = self._evals.get(name, 0) + 1
        if x == 0.0 or x != x:
            self._exact[name] = self._exact.get(name, 0) + (x == 0.0)
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
            elif self._never_positive(name):
                self._fire(name, self.config.never_drop)
        return (self._finding(),) if self._fired else ()

    def _never_positive(self, name: str) -> bool:
        """0 at every evaluation of the run (NaN counts as 0/0, but at least ``never_evals``
        exact zeros), never positive."""
        zeros = self._zeros.get(name, [])
        return (name not in self._best and name not in self._fired and len(zeros) == self._evals.get(name, 0)
                and self._exact.get(name, 0) >= self.config.never_evals)

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

    def _learning(self, drop: float | None = None) -> str:
        drop = self.config.loss_drop if drop is None else drop
        for name in ("val_loss", "loss"):
            first, last = self._first[name], self._last[name]
            if len(first) < self.config.smooth or not last:
                continue
            start, now = median(first), median(list(last))
            if start > 0 and now <= (1 - drop) * start:
                return f"{name} fell from {fmt(start)} to {fmt(now)} ({(now - start) / start:+.0%})"
        return ""

    def _fire(self, name: str, drop: float | None = None) -> Iterable[Finding]:
        if name in self._fired:
            return ()
        learning = self._learning(drop)
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
        said: dict[str, list[str]] = {}  # what is said -> the metrics it is said of
        where = []
        first_step = min(step for step, _ in self._fired.values())
        crossing = self._crossing()
        for name, (step, learning) in self._fired.items():
            zeros = self._zeros.get(name) or [step]
            nan = sum(1 for s in zeros if s in self._precision_nan)
            prec = f", precision NaN (0/0) at {nan} of them" if nan else ""
            if name in self._best:
                best_step, best = self._best[name]
                before = f", after reaching {fmt(best)} at step {best_step}"
            elif len(zeros) == self._evals.get(name):
                before = ", at every evaluation of the run, never positive"
            else:
                before = ", from the first evaluation on"
            said.setdefault(f"exactly 0 at {len(zeros)} evaluation(s) from step {zeros[0]}{prec}{before}"
                            f"{crossing}, while {learning}", []).append(_shown(name))
            where.append(name)
        parts = [f"{' and '.join(names)} {'are' if len(names) > 1 else 'is'} {text}" for text, names in said.items()]
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


def _shown(signal: str) -> str:
    return signal.removeprefix("metric.")
