"""divergence: the loss grows by orders of magnitude or heads to NaN."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterator

from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar, Series
from traindoc.findings import Finding

if TYPE_CHECKING:
    import numpy as np


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
        Example("fixtures/logs/tensorboard/diverging", 144),
        Example("fixtures/logs/tensorboard/healthy", None),
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

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The loss column at once: rolling medians of the finite values give the running best
        and peak; the first point where ``observe`` fires (a rise, or a non-finite value after
        one) freezes best and initial as it does; the peak goes on to the column's end."""
        from traindoc.detectors import _vector as vec

        return vec.judge(self, columns, {"loss"}, self._observe_columns)

    def _observe_columns(self, columns: dict[str, Series]) -> list[Finding]:
        import numpy as np

        from traindoc.detectors import _vector as vec

        col = columns.get("loss")
        if col is None:
            return []
        x = vec.floats(col.values)
        finite = np.isfinite(x)
        pos = np.flatnonzero(finite)
        cfg, n = self.config, self.config.smooth
        self._recent.extend(vec.items(col.values, pos[-n:]))
        if len(pos) < n:
            return []  # the median never formed: nothing to judge, a NaN cannot fire either
        med = vec.RollingMedian(x[pos], n)  # window k ends at the finite point k + n - 1
        self._initial = initial = float(med.at([0])[0])
        # A non-finite point is judged against the window of the last finite point before it.
        bad = np.flatnonzero(~finite)
        k_bad = bad - np.arange(len(bad)) - n  # bad[i] has bad[i] - i finite points before it
        bad, k_bad = bad[k_bad >= 0], k_bad[k_bad >= 0]  # < 0: no median yet
        # Screen: a window's max bounds its median, the running min of the windows' min the best.
        low = np.minimum.accumulate(med.lo)
        hi = med.hi
        may_rise = (hi > 0) & (hi >= cfg.factor * low) & (hi >= cfg.above_initial * initial)
        may_nan = hi[k_bad] >= cfg.nan_rise * low[k_bad] if cfg.nan_rise > 0 else k_bad >= 0
        if may_rise.any() or may_nan.any():
            return self._judge_series(col, pos, bad, k_bad, med.at(slice(None)))
        # observe cannot fire: only the state
        self._best, k = med.extreme(lowest=True)
        self._best_step = vec.item(col.steps, pos[k + n - 1])
        self._peak = med.extreme(lowest=False)[0]
        self._last = float(med.at([len(med) - 1])[0])
        return []

    def _judge_series(self, col: Series, pos: np.ndarray, bad: np.ndarray, k_bad: np.ndarray,
                      smooth: np.ndarray) -> list[Finding]:
        """observe's judgement with all the medians ``smooth``, ``smooth[k]`` at the finite
        point ``pos[k + n - 1]``; ``bad``: the non-finite points after the first median, whose
        last median before them is ``smooth[k_bad]``."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        cfg, n, initial = self.config, self.config.smooth, self._initial
        best = np.minimum.accumulate(smooth)
        lower = np.ones(len(smooth), dtype=bool)  # where a new best is set (strictly lower)
        lower[1:] = smooth[1:] < best[:-1]
        best_at = np.maximum.accumulate(np.where(lower, np.arange(len(smooth)), 0))
        rose = (best > 0) & (smooth >= cfg.factor * best) & (smooth >= cfg.above_initial * initial)
        k_rose = vec.first_true(rose)
        rise = cfg.nan_rise * best[k_bad]
        j = vec.first_true((smooth[k_bad] >= rise) & (rise > 0))
        k = len(smooth) - 1  # the point whose state stays (the last, or the one that fired)
        if k_rose is not None and (j is None or pos[k_rose + n - 1] < bad[j]):
            k = k_rose
            self._fired = (vec.item(col.steps, pos[k + n - 1]), float(smooth[k]), "rose")
        elif j is not None:
            k = int(k_bad[j])
            self._fired = (vec.item(col.steps, bad[j]), vec.item(col.values, bad[j]),
                           "turned non-finite after rising")
        self._best, self._best_step = float(best[k]), vec.item(col.steps, pos[best_at[k] + n - 1])
        self._last = float(smooth[k])
        self._peak = float(smooth[: k + 1].max())
        out = [self._finding(*self._fired)] if self._fired else []
        self._peak = float(smooth.max())  # after firing, observe still follows the peak
        return out

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
