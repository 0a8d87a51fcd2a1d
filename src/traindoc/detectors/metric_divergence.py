"""metric-divergence: an error metric (MAE, SHD, perplexity, the validation loss ...) grows by
an order of magnitude from its best value."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Iterable

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names, require
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar, Series, scalars
from traindoc.events.metrics import error_metric
from traindoc.findings import Finding


_LOSSES = 25  # the training losses whose median is "the training loss" at a metric's point


@dataclass
class _Track:
    recent: deque[float]
    initial: float | None = None
    best: float = math.inf
    best_step: int = 0
    fired: tuple[int, float] | None = None  # (step, smoothed value) when it crossed
    # the training loss (a median of its recent values) when the best was reached, and at the crossing
    loss_at_best: float | None = None
    loss_at_fired: float | None = None
    peak: tuple[int, float] = (0, -math.inf)
    last: tuple[int, float] = (0, math.nan)


class MetricDivergence(Detector):
    """The median of the last ``smooth`` values of a lower-is-better metric reaches ``factor``
    times the best such median and ``above_initial`` times the first one. The smoothing makes
    one bad evaluation not count; the initial-level test keeps a metric that wobbles near 0
    after converging quiet. A diverging training loss is ``divergence``'s.

    It watches ``val_loss`` and every metric whose name reads as an error (``metric.val_mae``:
    MAE, MSE, RMSE, SHD, error, perplexity ...), whichever face saw it: a log's column, a value
    the live script logged or printed. ``watch`` (a ``[tool.traindoc.detectors.metric-divergence]``
    table) names others.

    The training loss (the median of its last 25 values) when the best was reached and at the
    crossing tells a model fitting noise (still falling) from an unstable run (rising with it).
    """

    id = "metric-divergence"
    needs = frozenset({"val_loss"})
    uses = frozenset({"loss"})  # the training loss meanwhile: fitting noise, or unstable
    examples = (
        Example("fixtures/logs/golden/val_loss_explodes.jsonl", 25),
        Example("fixtures/logs/golden/healthy_val_loss.jsonl", None),
        Example("zoo/healthy_char_lm_annealed.py", None),
        Example("zoo/healthy_linear_probe_enough_examples.py", None),
    )

    # Carried over a resume: each metric's smoothing window and its initial, best, latest and peak
    # levels, and the latest training losses.
    carry = ("_tracks", "_loss")

    @dataclass(frozen=True)
    class Config:
        watch: tuple[str, ...] = ()  # other lower-is-better signals, e.g. "metric.val_dice_loss"
        factor: float = 5.0
        above_initial: float = 2.0
        smooth: int = 5

        def __post_init__(self) -> None:
            if self.factor <= 1 or self.above_initial < 1:
                raise ValueError("need factor > 1 and above_initial >= 1")
            require(self, smooth=">= 1")
            bad = [s for s in self.watch if not isinstance(s, str)]
            if bad:
                raise ValueError(f"watch must list signal names, got {bad!r}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._tracks: dict[str, _Track] = {}
        self._loss: deque[float] = deque(maxlen=_LOSSES)  # the latest training losses

    def reads(self, signal: str) -> bool:
        return signal in self.config.watch or error_metric(signal)

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The metrics point by point; the training loss as a column, not replayed point by
        point (a log's million rows): each metric point sees the losses up to its step."""
        import numpy as np

        rest = [c for name, c in columns.items() if name != "loss"]
        loss = columns.get("loss")
        steps = vals = np.empty(0)
        if loss is not None:
            steps, vals = np.asarray(loss.steps), np.asarray(loss.values, dtype=float)
            steps, vals = steps[np.isfinite(vals)], vals[np.isfinite(vals)]
        before = list(self._loss)
        out: list[Finding] = []
        for event in scalars(rest):
            k = int(np.searchsorted(steps, event.step, side="right"))
            self._loss = deque(before + vals[max(0, k - _LOSSES):k].tolist(), maxlen=_LOSSES)
            out.extend(self.observe(event))
        self._loss = deque(before + vals[-_LOSSES:].tolist(), maxlen=_LOSSES)
        return out

    def observe(self, event: Event) -> Iterable[Finding]:
        assert isinstance(event, Scalar)
        x = event.value
        if not math.isfinite(x):
            return ()
        t = self._tracks.get(event.name)
        if t is None:
            t = self._tracks[event.name] = _Track(deque(maxlen=self.config.smooth))
        t.recent.append(x)
        t.last = (event.step, x)
        if x > t.peak[1]:
            t.peak = (event.step, x)
        if len(t.recent) < self.config.smooth:
            return ()
        m = median(list(t.recent))
        if t.initial is None:
            t.initial = m
        loss = median(list(self._loss)) if self._loss else None
        if m < t.best:
            t.best, t.best_step, t.loss_at_best = m, event.step, loss
        cfg = self.config
        if t.fired is None and t.best > 0 and m >= cfg.factor * t.best and m >= cfg.above_initial * t.initial:
            t.fired, t.loss_at_fired = (event.step, m), loss
            return (self._finding(),)
        return ()

    def finish(self) -> Iterable[Finding]:
        return (self._finding(),) if any(t.fired for t in self._tracks.values()) else ()

    def _finding(self) -> Finding:
        fired = sorted(((t.fired[0], name, t) for name, t in self._tracks.items() if t.fired),
                       key=lambda item: item[0])
        parts = []
        for step, name, t in fired:
            assert t.fired is not None
            parts.append(
                f"{name} reached {fmt(t.fired[1])} at step {step} (median of {self.config.smooth}), "
                f"{fmt(t.fired[1] / t.best)}x its best {fmt(t.best)} (step {t.best_step}); peak "
                f"{fmt(t.peak[1])} at step {t.peak[0]}, last {fmt(t.last[1])}")
        first, t0 = fired[0][0], fired[0][2]
        shown = [name for _, name, _ in fired]
        a, b = t0.loss_at_best, t0.loss_at_fired
        fell = a is not None and b is not None and b < 0.9 * a
        meanwhile = (f"; meanwhile the training loss went from {fmt(a)} to {fmt(b)}"
                     + (": the model fits its training data at this metric's expense" if fell else "")
                     if a is not None and b is not None else "")
        causes = ["a loss term weighted far above the others (rebalance it)",
                  "an LR too high after warmup (lower it)",
                  "a model that fits noise while its training loss still falls"
                  + (", as here" if fell else "") + " (weight decay, fewer parameters or more data)"]
        why = ", ".join(causes[-1:] + causes[:-1] if fell else causes)
        return finding(
            self.id, step=first,
            message="; ".join(parts) + meanwhile + f" (threshold {fmt(self.config.factor)}x the best and "
                                                   f"{fmt(self.config.above_initial)}x the initial level).",
            fix=(
                f"Keep the checkpoint with the best {names(shown, 2)} and stop on it; then find what "
                f"changed at step {first}: {why}, a curriculum or data switch."
            ),
            evidence={
                "metrics": shown,
                "best": {name: t.best for _, name, t in fired},
                "best_step": {name: float(t.best_step) for _, name, t in fired},
                "peak": {name: t.peak[1] for _, name, t in fired},
                "last": {name: t.last[1] for _, name, t in fired},
                "ratio": {name: t.fired[1] / t.best for _, name, t in fired if t.fired},
                "threshold": self.config.factor,
                **({"train_loss_at_best": a, "train_loss_at_crossing": b} if a is not None and b is not None else {}),
            },
            where=shown,
        )
