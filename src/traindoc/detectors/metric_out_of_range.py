"""metric-out-of-range: a logged metric takes values its definition rules out (seed 000: a
negative Gini of expert load)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.events import Event, Scalar
from traindoc.events.metrics import metric_words
from traindoc.findings import Finding

# signal -> (low, high); None: unbounded.
_RANGES: dict[str, tuple[float | None, float | None]] = {
    "expert_gini": (0.0, 1.0),
    "expert_entropy": (0.0, None),
}
# A script's own name for a router's load: a Gini or an entropy of the experts' shares is bounded
# like the measured one (a Gini alone may be a credit model's normalized Gini, 2 AUC - 1 < 0).
_ROUTER_WORDS = frozenset({"expert", "experts", "router", "routing", "moe", "gate", "gating", "load"})


def _valid(signal: str) -> tuple[float | None, float | None] | None:
    """The range ``signal`` cannot leave, if its name says what it is."""
    if signal in _RANGES:
        return _RANGES[signal]
    words = metric_words(signal)
    if not words & _ROUTER_WORDS:
        return None
    return _RANGES["expert_gini"] if "gini" in words else _RANGES["expert_entropy"] if "entropy" in words else None


def _outside(x: float, lo: float | None, hi: float | None) -> float:
    """How far x lies outside [lo, hi]."""
    return max(lo - x if lo is not None else 0.0, x - hi if hi is not None else 0.0, 0.0)


@dataclass
class _Out:
    first: tuple[int, float]
    worst: tuple[int, float]
    count: int = 1


class MetricOutOfRange(Detector):
    """A value outside its signal's valid range by more than ``tolerance`` (relative to the
    bound's scale, so float rounding is not reported): the Gini coefficient of non-negative
    expert loads is in [0, 1), the router entropy is non-negative, under the script's own names
    too (``metric.moe_gini``; live, a logged Gini becomes ``metric.expert_gini`` once traindoc
    measures the router itself, and the logged one is the number that can be wrong). NaN/Inf are
    left to nonfinite.
    """

    id = "metric-out-of-range"
    needs = frozenset({"expert_gini"})
    uses = frozenset({"expert_entropy"})
    examples = (
        Example("fixtures/logs/golden/negative_gini.jsonl", 12),
        Example("fixtures/logs/golden/healthy_moe.jsonl", None),
        Example("zoo/healthy_moe_gini_of_load.py", None),
    )

    # Carried over a resume: each signal's first and worst value outside its range and how many.
    carry = ("_out",)

    @dataclass(frozen=True)
    class Config:
        tolerance: float = 1e-6

        def __post_init__(self) -> None:
            require(self, tolerance=">= 0")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._out: dict[str, _Out] = {}

    def reads(self, signal: str) -> bool:
        return _valid(signal) is not None  # a logged copy of a measured Gini: metric.expert_gini

    def observe(self, event: Event) -> Iterable[Finding]:
        assert isinstance(event, Scalar)
        x, name = event.value, event.name
        valid = _valid(name)
        if x != x or x in (math.inf, -math.inf) or valid is None:
            return ()
        lo, hi = valid
        tol = self.config.tolerance
        below = lo is not None and x < lo - tol * max(1.0, abs(lo))
        above = hi is not None and x > hi + tol * max(1.0, abs(hi))
        if not (below or above):
            return ()
        out = self._out.get(name)
        if out is None:
            self._out[name] = _Out((event.step, x), (event.step, x))
            return (self._finding(),)
        out.count += 1
        if _outside(x, lo, hi) > _outside(out.worst[1], lo, hi):
            out.worst = (event.step, x)
        return ()

    def finish(self) -> Iterable[Finding]:
        return (self._finding(),) if self._out else ()

    @staticmethod
    def _range(name: str) -> str:
        lo, hi = _valid(name) or (None, None)
        return f"[{fmt(lo or 0.0)}, {fmt(hi) if hi is not None else 'inf'}]"

    def _finding(self) -> Finding:
        items = sorted(self._out.items(), key=lambda kv: kv[1].first[0])
        parts = [
            f"{name} {fmt(o.first[1])} at step {o.first[0]} is outside its valid range {self._range(name)}"
            + (f" ({o.count} values out of range; most extreme {fmt(o.worst[1])} at step {o.worst[0]})"
               if o.count > 1 else "")
            for name, o in items
        ]
        return finding(
            self.id, step=items[0][1].first[0],
            message="; ".join(parts) + ": the metric is computed wrongly, so it cannot show what it was "
                                       "logged to show.",
            evidence={"signals": [n for n, _ in items],
                      "first": {n: o.first[1] for n, o in items},
                      "first_step": {n: float(o.first[0]) for n, o in items},
                      "most_extreme": {n: o.worst[1] for n, o in items},
                      "count": {n: float(o.count) for n, o in items}},
            where=[n for n, _ in items],
        )
