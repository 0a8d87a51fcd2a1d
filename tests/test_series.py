"""The column detectors (those with ``observe_series``) have one judgement, fed columns: a log's
column whole, or the engine's small columns of Scalars (live, a recorded stream). The findings
must not depend on how a run is cut: whole, in chunks at arbitrary boundaries, or point by point
with flushes anywhere. Checked on hand-made runs that make every detector fire and on random
ones (hypothesis)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traindoc import detectors
from traindoc.detectors.divergence import Divergence
from traindoc.detectors.exploding_gradients import ExplodingGradients
from traindoc.detectors.expert_collapse import ExpertCollapse
from traindoc.detectors.loss_spike import LossSpike
from traindoc.detectors.metric_divergence import MetricDivergence
from traindoc.detectors.nan_hidden_by_logging import NanHiddenByLogging
from traindoc.detectors.nonfinite import Nonfinite
from traindoc.detectors.scheduler_before_optimizer import SchedulerBeforeOptimizer
from traindoc.detectors.stalled_loss import StalledLoss
from traindoc.engine import Engine, Report
from traindoc.events import scalars
from traindoc.events import Event, ParamStats, RunEnd, RunStart, Scalar, Series

NAN, INF = math.nan, math.inf
COLUMNAR = tuple(c for c in detectors.DETECTORS if c.columnar)
# Besides the defaults (None): configs that fire easily, so that short runs exercise the
# firing paths, and corner cases.
CONFIGS: dict[type, list[Any]] = {
    StalledLoss: [StalledLoss.Config(improvement=0.1, smooth=3, min_steps=5),
                  StalledLoss.Config(improvement=0.1, smooth=1, min_steps=5),
                  StalledLoss.Config(improvement=0.125, smooth=2, min_steps=2)],
    ExplodingGradients: [ExplodingGradients.Config(unscaled=50.0, relative=5.0, window=2, early=3),
                         ExplodingGradients.Config(window=1, early=1)],
    Divergence: [Divergence.Config(factor=2.0, above_initial=1.1, nan_rise=2.0, smooth=3),
                 Divergence.Config(factor=1.5, above_initial=0.0, nan_rise=0.5, smooth=2),
                 Divergence.Config(factor=2.0, above_initial=0.0, nan_rise=0.0, smooth=1)],
    NanHiddenByLogging: [NanHiddenByLogging.Config(consecutive=2)],
    LossSpike: [LossSpike.Config(factor=1.5, z=2.0, min_rise=0.01, window=5, warmup=3, recover=2),
                LossSpike.Config(factor=1.1, z=0.5, min_rise=-1.0, window=5, warmup=0, recover=0)],
    SchedulerBeforeOptimizer: [SchedulerBeforeOptimizer.Config(tolerance=0.05, max_points=12)],
}


def configs(cls: type) -> list[Any]:
    return [None, *CONFIGS.get(cls, [])]


# ---- the ways a run reaches a detector -------------------------------------------------------------
def feed(det: Any, events: Sequence[Event]) -> Report:
    engine = Engine([det])
    for event in events:
        engine.feed(event)
    return engine.finish()


def start(columns: list[Series]) -> RunStart:
    return RunStart(source="logs", signals=tuple(c.name for c in columns))


def end(columns: list[Series]) -> RunEnd:
    return RunEnd(steps=max((int(c.steps[-1]) + 1 for c in columns if len(c)), default=0))


def whole(columns: list[Series]) -> list[Event]:
    """As a log reader sends them: one Series per column."""
    return [start(columns), *columns, end(columns)]


def chunked(columns: list[Series], cuts: Sequence[int]) -> list[Event]:
    """Each column in pieces, cut at the steps ``cuts``: the pieces of one step range go
    together (a detector reading several columns sees them in the same order as whole), and a
    flush point follows each range. A column of one signal is also cut inside a step, at the
    index of each cut."""
    out: list[Event] = [start(columns)]
    edges = sorted(set(cuts))
    for lo, hi in zip([None, *edges], [*edges, None]):
        for c in columns:
            steps = list(c.steps)
            a = 0 if lo is None else _split(steps, lo, len(columns))
            b = len(steps) if hi is None else _split(steps, hi, len(columns))
            if b > a:
                out.append(Series(c.name, c.steps[a:b], c.values[a:b]))
        out.append(RunStart(source="logs"))  # another event: a flush point
    return [*out, end(columns)]


def _split(steps: list[int], cut: int, n_columns: int) -> int:
    """Where a cut falls: before step ``cut``, or (one column) at index ``cut``."""
    if n_columns == 1:
        return min(max(cut, 0), len(steps))
    return next((i for i, s in enumerate(steps) if s >= cut), len(steps))


def points(columns: list[Series], flush_every: int) -> list[Event | None]:
    """As live sends them (the source is not named "live": nan-hidden-by-logging does not judge
    live streams): Scalars in step order (None: ``Engine.flush()``, every
    ``flush_every`` points; 0: never, the engine delivers every ``CHUNK`` points and at the end)."""
    out: list[Event | None] = [RunStart(source="points")]
    for i, event in enumerate(scalars(columns)):
        out.append(event)
        if flush_every and i % flush_every == flush_every - 1:
            out.append(None)
    return [*out, end(columns)]


def feed_points(det: Any, events: list[Event | None]) -> Report:
    engine = Engine([det])
    for event in events:
        if event is None:
            engine.flush()
        else:
            engine.feed(event)
    return engine.finish()


def same(a: object, b: object) -> bool:
    """Equal, NaN == NaN."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def check(cls: type, config: Any, columns: list[Series], cuts: Sequence[int] = (3, 7, 20),
          flush_every: int = 5, one_by_one: bool = True) -> list[Any]:
    """The run whole, chunked and point by point: the same report. Returns the findings.

    Columns do not say in which order two signals of one step came (a reader of several
    guesses it: row by row when they share their steps, else column by column), so a detector
    that reads several is checked cut only where no step holds two points of a column and
    every column is on the same steps."""
    want = feed(cls(config), whole(columns))
    json.dumps([f.to_dict() for f in want.findings])  # plain numbers, even from numpy columns
    mine = [list(c.steps) for c in columns if c.name in set(cls.needs) | set(getattr(cls, "uses", ()))]
    if len(mine) > 1 and not (all(s == mine[0] for s in mine) and all(np.diff(mine[0]) > 0)):
        return want.findings
    got = {"chunked": feed(cls(config), chunked(columns, cuts)),
           "points": feed_points(cls(config), points(columns, flush_every))}
    if one_by_one:
        got["one by one"] = feed_points(cls(config), points(columns, 1))
    want_f = [dataclasses.asdict(f) for f in want.findings]
    for how, rep in got.items():
        got_f = [dataclasses.asdict(f) for f in rep.findings]
        assert same(got_f, want_f), f"{cls.id} {how}: {got_f} != {want_f}"
        assert rep.disabled == want.disabled, (how, rep.disabled)
    assert not want.disabled, want.disabled
    return want.findings


# ---- hand-made runs -------------------------------------------------------------------------------
def decay(n: int, start: float = 2.5, floor: float = 0.2, noise: float = 0.05) -> list[float]:
    """A healthy loss: exponential decay plus deterministic noise."""
    return [floor + start * math.exp(-5 * k / n) + noise * ((k * 7919) % 13) / 13 for k in range(n)]


def onecycle(n: int, offset: float, warm: int = 10, max_lr: float = 1e-3) -> list[float]:
    """OneCycleLR's cosine warmup (div_factor 25) logged ``offset`` steps late, then a decay."""
    start = max_lr / 25
    lrs = [start + (max_lr - start) * 0.5 * (1 - math.cos(math.pi * min(k + offset, warm) / warm))
           for k in range(warm)]
    return lrs + [max_lr * 0.97 ** k for k in range(1, n - warm + 1)]


def run(loss: list[float] | None = None, grad_norm: list[float] | None = None,
        lr: list[float] | None = None, steps: list[int] | None = None,
        on: dict[str, list[int]] | None = None) -> list[Series]:
    """Columns on ``steps`` (one list object: the dense replay), or on their own (``on``)."""
    cols = []
    for name, values in (("loss", loss), ("grad_norm", grad_norm), ("lr", lr)):
        if values is not None:
            s = (on or {}).get(name, steps if steps is not None else list(range(len(values))))
            cols.append(Series(name, s, values))
    return cols


def spiky(n: int) -> list[float]:
    out = decay(n)
    for k in (n // 4, n // 2, n // 2 + 3):
        out[k] *= 10
    return out


def diverging(n: int, nan_at: int | None = None) -> list[float]:
    out = [1.0 + 0.01 * (k % 3) for k in range(n // 2)] + [1.3 ** k for k in range(n - n // 2)]
    if nan_at is not None:
        out[nan_at:] = [NAN] * (n - nan_at)
    return out


def hidden(n: int, at: int, zero: bool = False) -> tuple[list[float], list[float]]:
    loss, norm = decay(n), [1.0] * n
    norm[at:] = [NAN] * (n - at)
    if zero:
        loss[at + 2:] = [0.0] * (n - at - 2)
    return loss, norm


N = 300
CASES: dict[str, list[Series]] = {
    "healthy": run(decay(N), [1.0 + 0.1 * (k % 5) for k in range(N)], onecycle(N, 0)),
    "healthy noisy, near zero": run([0.01 * ((k * 31) % 17 - 3) for k in range(N)]),
    "plateau": run([1.0 + 0.001 * (k % 4) for k in range(N)]),
    "plateau, then improving": run([1.0] * 40 + decay(N - 40, 1.0, 0.1)),
    "up, back flat, then improving": run([1.0] * 3 + [2.0] * 12 + [1.0] * 40 + [0.5] * 10),
    "improved by exactly 1/8": run([1.0] * 5 + [0.875] * 10),
    "rising slowly": run([1.0 + 0.003 * k for k in range(N)]),
    "spikes": run(spiky(N)),
    "spike that stays up": run(decay(100) + [5.0] * 100),
    "spike right after the warmup": run([1.0] * 10 + [20.0] + [1.0] * 20),
    "jump of exactly the factor": run([1.0] * 30 + [3.0] + [1.0] * 20),
    "spikes with NaN after": run([v if k != N // 2 + 1 else NAN for k, v in enumerate(spiky(N))]),
    "diverging": run(diverging(N)),
    # A GAN's D and G steps, each a step of its own live: D's loss near 0.7, G's with an L1
    # weight of 100 falling from 114 to 11 (zoo/healthy_pix2pix_l1_100.py).
    "two objectives taking turns": run([0.7 - 0.2 * k / N + 0.01 * (k % 5) if k % 2 == 0
                                        else 11 + 103 * math.exp(-4 * k / N) for k in range(N)]),
    "rising after progress, then NaN": run([1.0] * 10 + [0.1] * 20 + [1.5] * 10 + [NAN, 1.0]),
    "NaN first in a delivery": run([1.0, 1.0, 1.0, NAN, 1.0]),  # cut at 3: judged on the state before
    "diverging to NaN, grad_norm too": run(diverging(60, nan_at=50), [1.0] * 30 + [1e4] * 30),
    "NaN loss": run(decay(50)[:20] + [NAN] + decay(50)[21:]),
    "inf grad_norm first": run(decay(50), [1.0] * 10 + [INF] + [1.0] * 39),
    "exploding grad_norm": run(decay(100), [1.0] * 40 + [1e5 * (1 + k % 3) for k in range(60)]),
    "grad_norm above the early median": run(decay(100), [1.0] * 10 + [300.0] * 90),
    "grad_norm high from the start": run(decay(30), [2e3] * 30),
    "grad_norm high, then down, then up": run(None, [2e3] * 4 + [1.0] * 3 + [2e3] * 9),
    "grad_norm all NaN": run(decay(30), [NAN] * 30),
    "grad_norm all inf": run(decay(30), [INF] * 30),
    "nan hidden by logging": run(*hidden(100, 59)),
    "nan hidden, logged loss 0": run(*hidden(100, 70, zero=True)),
    "one inf norm": run(decay(50), [1.0] * 20 + [INF] + [1.0] * 29),
    "onecycle pre-stepped": run(decay(N), None, onecycle(N, 1)),
    "onecycle pre-stepped twice, interval 5": run(None, None, onecycle(60, 2), list(range(0, 300, 5))),
    "onecycle correct": run(None, None, onecycle(N, 0)),
    "onecycle pre-stepped, uneven steps": run(None, None, onecycle(60, 1), [0, 1, 2, *range(4, 61)]),
    "lr NaN in the warmup": run(None, None, onecycle(60, 1)[:5] + [NAN] + onecycle(60, 1)[6:]),
    "duplicate steps": run(spiky(60), [1.0] * 30 + [NAN] * 30, onecycle(60, 1),
                           steps=sorted(k // 2 for k in range(60))),
    "duplicate steps, NaN in both": run([1.0, NAN, 2.0, INF, 1.0, 1.0], [NAN, 1.0, NAN, 1.0, 1.0, 1.0],
                                        steps=[0, 0, 1, 1, 2, 2]),
    "different steps": run(diverging(60, nan_at=50), [1.0] * 20 + [NAN] * 20, onecycle(30, 1),
                           on={"grad_norm": list(range(0, 80, 2)), "lr": [0] + list(range(2, 60, 2))}),
    "sparse, duplicate and different steps": run(
        [1.0, 2.0, NAN, 0.0, 3.0, INF, 1.0], [INF, NAN, NAN, 1.0],
        on={"loss": [0, 3, 3, 7, 7, 7, 9], "grad_norm": [3, 3, 7, 11]}),
    "values near the float limit": run([1e308, -1e308, 1.7e308, -1.7e308, 1e308] * 6 + [5e307] * 20,
                                       [1.7e308, 1e-300] * 25, [1e308, 1.7e308, 1.79e308]),
    "negative steps": run([1.0] * 5, [NAN] * 5, steps=[-1, 0, 1, 2, 3]),
    "empty columns": run([], [], []),
    "one point": run([NAN], [INF], [1e-3]),
    "one finite point": run([1.0], [1.0], [1e-3]),
    "expert load collapsing": [Series("expert_gini", list(range(N)), [0.25 + 0.6 * min(1.0, k / 150) for k in range(N)])],
    "expert load balanced": [Series("expert_gini", list(range(N)), [0.25 + 0.02 * (k % 3) for k in range(N)])],
    # an evaluation every 10 steps whose error climbs from step 100 while the loss still falls
    "error metric exploding": run(decay(N)) + [Series("metric.val_mae", list(range(0, N, 10)), [
        math.exp(-k / 5) if k < 10 else 0.4 + 0.5 * (k - 10) for k in range(N // 10)])],
}
# (case, detector, config: 0 the default, i CONFIGS[detector][i - 1]): what its finding says.
# The cases do what they claim, and reach the corners of the judgements.
EXPECT: list[tuple[str, type, int, str]] = [
    ("plateau", StalledLoss, 0, "improved by"),
    ("spikes", LossSpike, 0, "spikes in all"),
    ("spikes with NaN after", LossSpike, 1, "loss"),
    ("spike right after the warmup", LossSpike, 0, "at step 10"),
    ("jump of exactly the factor", LossSpike, 0, "at step 30 is 3x"),
    ("diverging", Divergence, 0, "the loss rose"),
    ("rising after progress, then NaN", Divergence, 0, "turned non-finite"),
    ("NaN first in a delivery", Divergence, 2, "turned non-finite"),
    ("diverging to NaN, grad_norm too", Nonfinite, 0, "the loss is nan"),
    ("NaN loss", Nonfinite, 0, "at step 20"),
    ("inf grad_norm first", Nonfinite, 0, "the grad_norm is non-finite"),
    ("exploding grad_norm", ExplodingGradients, 0, "the median of the first 5 norms"),
    ("grad_norm above the early median", ExplodingGradients, 1, "consecutive"),
    ("grad_norm high from the start", ExplodingGradients, 0, "no parameter norm"),
    ("grad_norm high, then down, then up", ExplodingGradients, 0, "from step 7"),
    ("grad_norm all inf", ExplodingGradients, 0, "gradient norm inf at the first step"),
    ("nan hidden by logging", NanHiddenByLogging, 0, "from step 59"),
    ("nan hidden, logged loss 0", NanHiddenByLogging, 1, "exactly 0"),
    ("onecycle pre-stepped", SchedulerBeforeOptimizer, 0, "1 step later"),
    ("onecycle pre-stepped twice, interval 5", SchedulerBeforeOptimizer, 0, "2 steps later"),
    ("expert load collapsing", ExpertCollapse, 0, "Gini"),
    ("error metric exploding", MetricDivergence, 0, "fits its training data"),
]
QUIET: list[tuple[str, type, int]] = [
    ("healthy", cls, 0) for cls in COLUMNAR
] + [("one inf norm", NanHiddenByLogging, 0), ("onecycle correct", SchedulerBeforeOptimizer, 0),
     ("onecycle pre-stepped, uneven steps", SchedulerBeforeOptimizer, 0),
     ("spike that stays up", LossSpike, 0), ("rising slowly", Divergence, 0),
     ("two objectives taking turns", Divergence, 0),
     ("improved by exactly 1/8", StalledLoss, 3),
     # judged at the end only: a plateau that ends (a long warmup) is not a stall
     ("plateau, then improving", StalledLoss, 1), ("up, back flat, then improving", StalledLoss, 2),
     ("expert load balanced", ExpertCollapse, 0)]


@pytest.mark.parametrize("cls", COLUMNAR, ids=[c.id for c in COLUMNAR])
def test_hand_made_runs(cls: type) -> None:
    fired = {}
    for name, columns in CASES.items():
        for i, config in enumerate(configs(cls)):
            found = check(cls, config, columns)
            if found:
                fired[name, i] = found[0]
        arrays = [Series(c.name, np.asarray(c.steps, dtype=np.int64), np.asarray(c.values))
                  for c in columns]  # as a source may hand them
        with np.errstate(all="ignore"):  # the per-point replay's arithmetic on numpy scalars
            check(cls, None, arrays, cuts=(1, 2, 50))
    assert fired, f"{cls.id} fired on no hand-made run"
    for name, who, i, text in EXPECT:
        if who is cls:
            f = fired.get((name, i))
            assert f is not None and text in f.message + str(f.evidence), (name, i, f)
    for name, who, i in QUIET:
        if who is cls:
            assert (name, i) not in fired, (name, i)


def test_big_runs() -> None:
    """Long columns, where the column judgements skip work (screens, bounds), cut in a few places
    and, point by point, delivered every ``CHUNK`` points by the engine alone."""
    n = 20_000
    healthy = decay(n)
    spikes = list(healthy)
    for k in (3000, 9000, 9004, 15000):
        spikes[k] *= 6
    spikes[12000] = NAN
    stalled = [1.0 + 0.05 * ((k * 7919) % 13) / 13 for k in range(n)]
    runs = [run(healthy, [1.0] * n, onecycle(n, 0)), run(spikes, [1.0] * (n - 50) + [NAN] * 50),
            run(stalled, [1.0] * 5000 + [5e3] * (n - 5000), onecycle(n, 1)),
            run(healthy[:10000] + [1.001 ** k for k in range(n - 10000)])
            + [Series("expert_gini", list(range(n)), [0.25 + 0.6 * min(1.0, k / 8000) for k in range(n)]),
               Series("val_loss", list(range(0, n, 100)), [1.0 if k < 100 else 0.1 * k for k in range(n // 100)])]]
    fired = set()
    for columns in runs:
        for cls in COLUMNAR:
            fired |= {f.id for f in check(cls, None, columns, cuts=(4095, 9001, 9002, 15000),
                                          flush_every=0, one_by_one=False)}
    assert fired == {c.id for c in COLUMNAR}


def test_exploding_gradients_references() -> None:
    """A norm huge from the first step is judged against the parameter norm where the source
    measures it; a log of the norm alone against 1000 (``unscaled``)."""
    def report(norms: list[float], weights: float | None) -> list[Any]:
        params = [] if weights is None else [ParamStats(
            step=0, name="w", dtype="torch.float32", numel=4, requires_grad=True, norm=weights, grad=1.0)]
        column = Series("grad_norm", list(range(len(norms))), norms)
        found = feed(ExplodingGradients(), [RunStart(source="live"), *params, column]).findings
        one_by_one = feed(ExplodingGradients(), [RunStart(source="live"), *params,
                                                 *scalars([column])]).findings
        assert same([dataclasses.asdict(f) for f in found], [dataclasses.asdict(f) for f in one_by_one])
        return found

    (f,) = report([600.0] * 8, weights=5.0)  # 120x the weights
    assert f.step == 0 and f.evidence["reference"] == "parameter norm" and "w (100%)" in f.message
    assert report([600.0] * 8, weights=10.0) == []  # 60x: no
    assert report([600.0] * 8, weights=None) == []  # below 1000 without weights to compare with
    (f,) = report([2e3] * 8, weights=None)
    assert f.evidence["reference"] == "unscaled"
    assert report([2e3] * 8, weights=1e3) == []  # 2x the weights: the scale is the model's
    (f,) = report([1.0] * 6 + [150.0] * 6, weights=1e3)  # grew 150x
    assert f.step == 6 and f.evidence["reference"] == "early median"


class Spy(detectors.Detector):
    """A column detector that records what reaches it."""

    id = "spy"
    needs = frozenset({"loss"})

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def observe(self, event: Event) -> None:
        self.calls.append(("observe", event))

    def observe_series(self, columns: dict[str, Series]) -> None:
        self.calls.append(("series", {k: (list(c.steps), list(c.values)) for k, c in columns.items()}))


def test_engine_sends_column_detectors_columns_only() -> None:
    """Scalars reach a column detector as columns, at flush points, in order with its events."""
    spy = Spy()
    engine = Engine([spy])
    for step in range(3):
        engine.feed(Scalar(step, "loss", float(step)))
    assert spy.calls == []
    engine.flush()
    assert spy.calls == [("series", {"loss": ([0, 1, 2], [0.0, 1.0, 2.0])})]
    engine.feed(Scalar(3, "loss", 3.0))
    engine.feed(Series("loss", [4, 5], [4.0, 5.0]))  # the Scalar before it goes first
    engine.feed(Series("loss", [6], [6.0]))  # the same signal twice: two calls
    engine.feed(RunEnd(steps=7))  # not its signal: its queue waits
    assert spy.calls[1:] == []
    engine.flush()
    assert [c for _, c in spy.calls[1:]] == [{"loss": ([3], [3.0])}, {"loss": ([4, 5], [4.0, 5.0])},
                                             {"loss": ([6], [6.0])}]
    assert engine.finish().ran == ["spy"]


# ---- random runs ----------------------------------------------------------------------------------
SPECIAL = st.sampled_from([0.0, -0.0, 1.0, 2.0, 1e-3, 1e3, 1e5, NAN, INF, -INF, 1e300, -1.0])


@st.composite
def values(draw: Callable[..., Any], n: int) -> list[float]:
    """Columns that look like training curves (trend, noise, spikes, plateaus, NaN) or any floats."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.lists(st.one_of(st.floats(), SPECIAL), min_size=n, max_size=n))
    base = draw(st.sampled_from([1.0, 0.01, 100.0, -0.5, 0.0, 2e3]))
    growth = draw(st.sampled_from([1.0, 0.97, 1.02, 1.2]))
    noise = draw(st.sampled_from([0.0, 0.01, 0.3]))
    seed = draw(st.integers(0, 1000))
    out = [base * growth ** k + noise * (((k + seed) * 7919) % 23 - 11) / 11 for k in range(n)]
    for _ in range(draw(st.integers(0, 4))):
        k = draw(st.integers(0, max(0, n - 1)))
        if n:
            out[k] = draw(st.one_of(SPECIAL, st.just(out[k] * 20), st.just(out[k] + 1)))
    return out


@st.composite
def columns(draw: Callable[..., Any]) -> list[Series]:
    n = draw(st.integers(0, 80))
    gaps = st.lists(st.integers(0, 3), min_size=n, max_size=n)  # 0: a duplicate step
    shared = draw(st.one_of(st.just(list(range(n))),
                            gaps.map(lambda d: [sum(d[:i]) for i in range(len(d))])))
    out = []
    for name in draw(st.permutations(["loss", "grad_norm", "lr"])):
        kind = draw(st.integers(0, 3))
        if kind == 3:
            continue  # not logged
        steps = shared if kind == 0 else list(shared) if kind == 1 else sorted(
            draw(st.lists(st.integers(0, 40), max_size=60)))
        out.append(Series(name, steps, draw(values(len(steps)))))
    return out


@pytest.mark.parametrize("cls", COLUMNAR, ids=[c.id for c in COLUMNAR])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cols=columns(), config=st.integers(0, 3), cuts=st.lists(st.integers(-1, 90), max_size=6),
       flush_every=st.integers(0, 7))
def test_random_runs(cls: type, cols: list[Series], config: int, cuts: list[int],
                     flush_every: int) -> None:
    all_configs = configs(cls)
    with np.errstate(all="ignore"):
        check(cls, all_configs[min(config, len(all_configs) - 1)], cols, cuts, flush_every)


def test_two_signals_of_one_step_read_in_either_order() -> None:
    """The loss and the gradient norm both NaN at one step: the columns whole name them in the
    columns' order, the points one at a time in the stream's; the finding is the same. (Found
    by a random draw of test_random_runs.)"""
    nan = math.nan
    cols = [Series("grad_norm", list(range(6)), [1.0, 1.0, nan, 1.0, 1.0, 1.0]),
            Series("loss", list(range(6)), [1.0, 1.0, nan, 1.0, 1.0, 1.0])]
    (found,) = check(Nonfinite, None, cols, [], flush_every=3)
    assert found.evidence["signals"] == ["grad_norm", "loss"]
