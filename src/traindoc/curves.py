"""The curves a report plots: each signal of a run kept in a bounded number of buckets.

A report shows the series a finding rests on (the loss, the gradient norm, the update/weight
ratio, the LR, the GradScaler's scale, a metric). A run of a million steps must not keep a
million points, so each curve holds at most ``BUCKETS`` buckets of ``width`` consecutive steps;
when a new bucket would exceed that, neighbours merge and ``width`` doubles. A bucket keeps its
lowest and its highest point (with their steps), so a one-step spike survives any downsampling,
and its first non-finite value apart (NaN has no order). Cost: O(1) amortized per point, one
dict per curve; a log's column (a ``Series``) is reduced with numpy first.

Fed by the engine with every event; knows no torch, no file and no rendering.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence, Union

from traindoc.events import Event, GradScale, LoaderWait, ParamStats, Scalar, Series

if TYPE_CHECKING:
    import numpy as np

BUCKETS = 256  # per curve: a plot has at most 2 * BUCKETS points
MAX_CURVES = 64  # a log with hundreds of columns keeps the first 64 signals it shows
# Curves made from per-parameter statistics and loop timings (besides the Scalars' own names).
UPDATE_RATIO = "update_ratio"  # median over parameters of ||dw|| / ||w|| on a sampled step
UNCHANGED_SHARE = "unchanged_share"  # median share of elements a step left bit-identical
GRAD_SCALE = "grad_scale"  # an AMP GradScaler's scale
STEPS_PER_S = "steps_per_s"  # 1 / the median wall time of a step (live, with a DataLoader)
DERIVED = {
    UPDATE_RATIO: "update/weight ratio ||dw||/||w||, median over parameters (sampled steps)",
    UNCHANGED_SHARE: "share of elements left bit-identical by a step, median over parameters",
    GRAD_SCALE: "GradScaler scale",
    STEPS_PER_S: "training steps per second",
}
ParamValue = Union[str, int, float, None]


@dataclass(frozen=True)
class Curve:
    """A downsampled series: ``values[i]`` at ``steps[i]`` in step order, each bucket's lowest
    and highest point; ``nonfinite`` the first non-finite value of each bucket that had one,
    as (step, "nan" | "inf" | "-inf"); ``points`` how many points the run had, ``width`` how
    many consecutive steps a bucket spans."""

    steps: list[int]
    values: list[float]
    nonfinite: list[tuple[int, str]]
    points: int
    width: int


class _Buckets:
    """One signal's buckets: index -> [low step, low, high step, high]."""

    __slots__ = ("width", "finite", "bad", "points")

    def __init__(self) -> None:
        self.width = 1
        self.finite: dict[int, list[float]] = {}
        self.bad: dict[int, tuple[int, float]] = {}  # index -> the bucket's first non-finite point
        self.points = 0

    def add(self, step: int, value: float, count: int = 1) -> None:
        self.points += count
        key = step // self.width
        if value - value != 0.0:  # NaN or +-inf (cheaper than math.isfinite on the hot path)
            if key not in self.bad:
                self.bad[key] = (step, value)
                if len(self.bad) > BUCKETS:
                    self._merge()
            return
        b = self.finite.get(key)
        if b is None:
            self.finite[key] = [step, value, step, value]
            if len(self.finite) > BUCKETS:
                self._merge()
        elif value < b[1]:
            b[0], b[1] = step, value
        elif value > b[3]:
            b[2], b[3] = step, value

    def _merge(self, width: int = 1) -> None:
        """Double the width until the buckets fit and it is at least ``width``: amortized O(1)
        per point, since a merge leaves about half the buckets and each new one needs
        ``width`` new steps."""
        while len(self.finite) > BUCKETS or len(self.bad) > BUCKETS or self.width < width:
            self.width *= 2
            merged: dict[int, list[float]] = {}
            for key, b in self.finite.items():
                m = merged.get(key // 2)
                if m is None:
                    merged[key // 2] = b
                    continue
                if b[1] < m[1]:
                    m[0], m[1] = b[0], b[1]
                if b[3] > m[3]:
                    m[2], m[3] = b[2], b[3]
            self.finite = merged
            bad: dict[int, tuple[int, float]] = {}
            for key, point in sorted(self.bad.items()):
                bad.setdefault(key // 2, point)
            self.bad = bad

    def add_column(self, steps: Sequence[int], values: Sequence[float]) -> None:
        """A log's column: numpy reduces it to each bucket's lowest and highest point first, so
        a million rows cost a few vectorized passes and at most ``4 * BUCKETS`` Python calls."""
        import numpy as np

        s = np.asarray(steps, dtype=np.int64)
        v = np.asarray(values, dtype=np.float64)
        if len(s) <= 4 * BUCKETS:
            for step, value in zip(s.tolist(), v.tolist()):
                self.add(step, value)
            return
        width = self.width
        while int(s.max()) // width - int(s.min()) // width >= BUCKETS:
            width *= 2
        self._merge(width)
        key = s // self.width
        if np.any(key[1:] < key[:-1]):  # a log's steps are non-decreasing; be safe if not
            order = np.argsort(key, kind="stable")
            s, v, key = s[order], v[order], key[order]
        ok = np.isfinite(v)
        ks, ss, vs = key[ok], s[ok], v[ok]
        if len(ks):
            starts = _firsts(ks)
            first = np.zeros(len(ks), dtype=bool)
            first[starts] = True
            segment = np.cumsum(first) - 1  # each point's bucket, 0-based
            for reduce in (np.minimum, np.maximum):
                extreme = reduce.reduceat(vs, starts)
                hits = np.flatnonzero(vs == extreme[segment])
                pick = hits[_firsts(segment[hits])]
                for step, value in zip(ss[pick].tolist(), vs[pick].tolist()):
                    self.add(step, value, count=0)
        bad = np.flatnonzero(~ok)
        if len(bad):
            pick = bad[_firsts(key[bad])]
            for step, value in zip(s[pick].tolist(), v[pick].tolist()):
                self.add(step, value, count=0)
        self.points += len(s)

    def curve(self) -> Curve:
        points: list[tuple[int, float]] = []
        for b in self.finite.values():
            points.append((int(b[0]), b[1]))
            if b[2] != b[0]:
                points.append((int(b[2]), b[3]))
        points.sort(key=lambda p: p[0])
        bad = sorted(self.bad.values())
        return Curve(steps=[p[0] for p in points], values=[p[1] for p in points],
                     nonfinite=[(int(s), _word(v)) for s, v in bad], points=self.points, width=self.width)


def _firsts(keys: np.ndarray) -> np.ndarray:
    """Positions where a sorted key array starts a new key."""
    import numpy as np

    return np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))


def _word(value: float) -> str:
    return "nan" if value != value else ("inf" if value > 0 else "-inf")


class Curves:
    """Every curve of one run, fed event by event (``feed``) and read once at the end."""

    def __init__(self) -> None:
        self._curves: dict[str, _Buckets] = {}
        # The last measurement of each parameter (a report's per-tensor tables); bounded by the
        # model's parameter count.
        self._params: dict[str, ParamStats] = {}
        self._param_step: int | None = None
        self._updates: list[float] = []
        self._unchanged: list[float] = []

    def feed(self, event: Event) -> None:
        if isinstance(event, Scalar):
            self._add(event.name, event.step, event.value)
        elif isinstance(event, Series):
            if len(event):
                buckets = self._buckets(event.name)
                if buckets is not None:
                    buckets.add_column(event.steps, event.values)
        elif isinstance(event, ParamStats):
            self._param(event)
        elif isinstance(event, GradScale):
            self._add(GRAD_SCALE, event.step, event.scale)
        elif isinstance(event, LoaderWait) and event.step_s > 0:
            self._add(STEPS_PER_S, event.step, 1.0 / event.step_s)

    def series(self) -> dict[str, Curve]:
        self._close_param_step()
        return {name: b.curve() for name, b in self._curves.items()}

    def params(self) -> dict[str, dict[str, ParamValue]]:
        """The last measurement of each parameter, by name."""
        return {name: {"step": p.step, "dtype": p.dtype, "numel": p.numel, "norm": p.norm, "grad": p.grad,
                       "update": p.update, "unchanged": p.unchanged, "moved": p.moved, "steps": p.steps}
                for name, p in self._params.items()}

    def _buckets(self, name: str) -> _Buckets | None:
        b = self._curves.get(name)
        if b is None and len(self._curves) < MAX_CURVES:
            b = self._curves[name] = _Buckets()
        return b

    def _add(self, name: str, step: int, value: float) -> None:
        b = self._curves.get(name) or self._buckets(name)
        if b is not None:
            b.add(int(step), float(value))

    def _param(self, p: ParamStats) -> None:
        if p.step != self._param_step:
            self._close_param_step()
            self._param_step = p.step
        self._params[p.name] = p
        if p.update is not None and math.isfinite(p.update):
            self._updates.append(p.update)
        if p.unchanged is not None:
            self._unchanged.append(p.unchanged)

    def _close_param_step(self) -> None:
        """One point per sampled step: the median over the parameters measured on it."""
        if self._param_step is not None:
            if self._updates:
                self._add(UPDATE_RATIO, self._param_step, statistics.median(self._updates))
            if self._unchanged:
                self._add(UNCHANGED_SHARE, self._param_step, statistics.median(self._unchanged))
        self._param_step, self._updates, self._unchanged = None, [], []
