"""Pure maths shared by detectors: robust statistics over short series. No torch."""

from __future__ import annotations

import math
from typing import Sequence


def finite(xs: Sequence[float]) -> list[float]:
    return [x for x in xs if math.isfinite(x)]


def median(xs: Sequence[float]) -> float:
    """Median of the finite values; NaN when there are none."""
    ys = sorted(finite(xs))
    if not ys:
        return math.nan
    mid = len(ys) // 2
    return ys[mid] if len(ys) % 2 else 0.5 * (ys[mid - 1] + ys[mid])


def mad(xs: Sequence[float]) -> float:
    """Median absolute deviation (unscaled)."""
    m = median(xs)
    return median([abs(x - m) for x in finite(xs)])


def robust_z(x: float, window: Sequence[float]) -> float:
    """How many (MAD-scaled) deviations ``x`` lies above the window's median."""
    m, d = median(window), mad(window)
    scale = 1.4826 * d if d > 0 else max(abs(m) * 1e-3, 1e-12)
    return (x - m) / scale


def quantile(xs: Sequence[float], q: float) -> float:
    ys = sorted(finite(xs))
    if not ys:
        return math.nan
    pos = q * (len(ys) - 1)
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


class Ema:
    """Exponential moving average with bias correction (so early values are not pulled to 0)."""

    def __init__(self, span: int) -> None:
        self.alpha = 2.0 / (span + 1.0)
        self._avg = 0.0
        self._weight = 0.0

    def update(self, x: float) -> float:
        self._avg = (1 - self.alpha) * self._avg + self.alpha * x
        self._weight = (1 - self.alpha) * self._weight + self.alpha
        return self.value

    @property
    def value(self) -> float:
        return self._avg / self._weight if self._weight else math.nan

    def state_dict(self) -> dict[str, float]:
        return {"avg": self._avg, "weight": self._weight}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self._avg, self._weight = state["avg"], state["weight"]
