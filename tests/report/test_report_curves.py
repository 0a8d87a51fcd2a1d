"""The report's curves: bounded whatever the run's length, each bucket's lowest and highest point
kept (a one-step spike or dip survives), non-finite values kept apart, and a log's column
(reduced with numpy) giving the same curve as the same points one by one."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from traindoc.curves import BUCKETS, GRAD_SCALE, UNCHANGED_SHARE, UPDATE_RATIO, Curve, Curves
from traindoc.events import GradScale, ParamStats, Scalar, Series


def by_points(steps: list[int], values: list[float]) -> Curve:
    c = Curves()
    for s, v in zip(steps, values):
        c.feed(Scalar(s, "x", v))
    return c.series()["x"]


def by_column(steps: list[int], values: list[float]) -> Curve:
    c = Curves()
    c.feed(Series("x", np.array(steps), np.array(values)))
    return c.series()["x"]


def brute(steps: list[int], values: list[float], width: int) -> tuple[dict[int, float], dict[int, float]]:
    """Each bucket's min and max by hand."""
    lo: dict[int, float] = {}
    hi: dict[int, float] = {}
    for s, v in zip(steps, values):
        if math.isfinite(v):
            lo[s // width] = min(lo.get(s // width, v), v)
            hi[s // width] = max(hi.get(s // width, v), v)
    return lo, hi


@pytest.mark.parametrize("n", [1, 10, BUCKETS, BUCKETS + 1, 5000, 100_003])
def test_bounded_and_every_bucket_extreme_kept(n: int) -> None:
    rng = random.Random(n)
    steps = list(range(n))
    values = [rng.gauss(0, 1) if rng.random() > 0.001 else math.nan for _ in steps]
    for curve in (by_points(steps, values), by_column(steps, values)):
        assert curve.points == n and len(curve.steps) <= 2 * BUCKETS
        assert curve.steps == sorted(curve.steps)
        lo, hi = brute(steps, values, curve.width)
        got: dict[int, list[float]] = {}
        for s, v in zip(curve.steps, curve.values):
            got.setdefault(s // curve.width, []).append(v)
        assert {k: min(v) for k, v in got.items()} == lo
        assert {k: max(v) for k, v in got.items()} == hi
        bad = {s // curve.width for s, v in zip(steps, values) if not math.isfinite(v)}
        assert {s // curve.width for s, _ in curve.nonfinite} == bad


def test_column_and_points_agree_and_a_spike_survives() -> None:
    steps = list(range(0, 300_000, 3))
    values = [1.0 + 1e-6 * s for s in steps]
    values[40_000] = 1e6
    values[70_000] = -5.0
    values[12] = math.inf
    a, b = by_points(steps, values), by_column(steps, values)
    assert a.width == b.width and a.nonfinite == b.nonfinite == [(36, "inf")]
    for curve in (a, b):
        assert max(curve.values) == 1e6 and curve.steps[curve.values.index(1e6)] == 120_000
        assert min(curve.values) == -5.0
    assert a == b


def test_memory_stays_bounded_while_the_run_goes_on() -> None:
    c = Curves()
    for i in range(50_000):
        c.feed(Scalar(i, "loss", 1.0 / (1 + i)))
        if i % 5000 == 0:
            assert len(c._curves["loss"].finite) <= BUCKETS  # never more, at any point of the run


def test_per_parameter_statistics_and_scale_curves() -> None:
    c = Curves()
    for step in (0, 10):
        for i, name in enumerate(("a", "b", "c")):
            c.feed(ParamStats(step=step, name=name, dtype="torch.float32", numel=4, requires_grad=True,
                              norm=1.0, update=10.0 ** -(i + 1 + step), unchanged=0.1 * i))
        c.feed(GradScale(step=step, scale=2.0 ** (16 - step), skipped=False))
    series = c.series()
    assert series[UPDATE_RATIO].steps == [0, 10] and series[UPDATE_RATIO].values == [1e-2, 1e-12]
    assert series[UNCHANGED_SHARE].values == [0.1, 0.1]
    assert series[GRAD_SCALE].values == [2.0 ** 16, 2.0 ** 6]
    assert c.params()["c"]["update"] == 1e-13 and c.params()["a"]["step"] == 10
