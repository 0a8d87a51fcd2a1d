"""expert-collapse's per-expert loads, one judgement whatever the delivery: columns on different
steps (an expert missing at some steps, NaN, duplicate steps) and a step's loads cut over two
deliveries or across a resume give what whole columns give, and each step's scaled Gini is the
one of the shares of the experts present at that step."""

from __future__ import annotations

import dataclasses
import io
import math
from typing import Any, Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traindoc.detectors.expert_collapse import ExpertCollapse
from traindoc.engine import Engine
from traindoc.events import Scalar, Series, scalars

from test_series import same  # equal, NaN == NaN

NAN, INF = math.nan, math.inf


def config(names: Sequence[str], **kw: Any) -> ExpertCollapse.Config:
    return ExpertCollapse.Config(**kw)  # the loads are read by name


def findings(cfg: ExpertCollapse.Config, calls: list[dict[str, Series]], engine: Engine | None = None) -> list[dict[str, Any]]:
    """The report's findings when the detector gets ``calls``, one delivery each."""
    engine = engine or Engine([ExpertCollapse(cfg)])
    for call in calls:
        for column in call.values():
            engine.feed(column)
        engine.flush()
    report = engine.finish()
    assert report.disabled == []
    return [dataclasses.asdict(f) for f in report.findings]


# ---- a step's loads in two deliveries --------------------------------------------------------------
# Step 2's loads: experts 0-3 hold 100, 0, 0, 0 (Gini 1 on their own), experts 4-7 100 each: a
# Gini of 0.43 over the eight. Judged in halves, the first half fires (window 1).
NAMES = [f"expert_load.{i}" for i in range(8)]
ROWS = [[10.0] * 8, [10.0] * 8, [100.0, 0.0, 0.0, 0.0, 100.0, 100.0, 100.0, 100.0], [10.0] * 8]
QUICK = dict(window=1, min_points=1)


def columns_of(rows: list[list[float]], steps: Sequence[int], names: Sequence[str] = NAMES) -> dict[str, Series]:
    return {n: Series(n, list(steps), [r[i] for r in rows]) for i, n in enumerate(names)}


def test_a_step_cut_in_two_is_judged_whole() -> None:
    whole = findings(config(NAMES, **QUICK), [columns_of(ROWS, range(4))])
    assert whole == []
    first = columns_of(ROWS[:3], range(3))
    for n in NAMES[4:]:  # experts 4-7 of step 2 come in the next delivery
        first[n] = Series(n, [0, 1], first[n].values[:2])
    second = {n: Series(n, [2, 3] if n in NAMES[4:] else [3], [100.0, 10.0] if n in NAMES[4:] else [10.0])
              for n in NAMES}
    assert findings(config(NAMES, **QUICK), [first, second]) == whole
    # The same cut with the step's last delivery the run's last: judged at finish, whole.
    last = {n: Series(n, [2], [100.0]) for n in NAMES[4:]}
    cut_short = {n: Series(n, c.steps, c.values) for n, c in first.items()}
    assert findings(config(NAMES, **QUICK), [cut_short, last]) == findings(
        config(NAMES, **QUICK), [columns_of(ROWS[:3], range(3))])


def test_a_step_cut_by_a_resume_is_judged_whole() -> None:
    """The loads waiting for the rest of their step travel in the state (plain data): at a
    threshold of 0.4, step 2 fires with its Gini over the eight experts, 3/7 (its halves alone
    give 1 and 0)."""
    torch = pytest.importorskip("torch")
    cfg = config(NAMES, gini=0.4, **QUICK)
    rest = columns_of(ROWS[2:], [2, 3])
    want = findings(cfg, [columns_of(ROWS, range(4))])
    assert [(f["step"], f["evidence"]["gini"]) for f in want] == [(2, pytest.approx(3 / 7))]
    first = columns_of(ROWS[:3], range(3))
    for n in NAMES[4:]:  # experts 4-7 of step 2 come after the resume
        first[n] = Series(n, [0, 1], first[n].values[:2])
        rest[n] = Series(n, [2, 3], rest[n].values)
    for n in NAMES[:4]:
        rest[n] = Series(n, [3], rest[n].values[1:])
    engine = Engine([ExpertCollapse(cfg)])
    for column in first.values():
        engine.feed(column)
    buf = io.BytesIO()
    torch.save(engine.state_dict(), buf)  # delivers the columns first: the half step waits
    buf.seek(0)
    again = Engine([ExpertCollapse(cfg)])
    again.load_state_dict(torch.load(buf, weights_only=True))
    assert findings(cfg, [rest], again) == want


# ---- columns on different steps ---------------------------------------------------------------------
def test_an_expert_missing_at_some_steps_is_absent_from_their_shares() -> None:
    """Experts 0-3 hold 6, 1, 1, 6 (scaled Gini 0.476); at steps 5-9 expert 3 is not logged:
    the shares of the three present, 6/8, 1/8, 1/8, have a scaled Gini of 0.625. Not a load of 0
    (0.75, 4 experts), not a step skipped (no finding)."""
    names = [f"expert_load.{i}" for i in range(4)]
    cols = {n: Series(n, list(range(12)), [6.0 if i in (0, 3) else 1.0] * 12) for i, n in enumerate(names)}
    cols[names[3]] = Series(names[3], [0, 1, 2, 3, 4, 10, 11], [6.0] * 7)
    cfg = config(names, window=3, min_points=3)
    (f,) = findings(cfg, [cols])
    assert f["step"] == 6 and f["evidence"]["gini"] == pytest.approx(0.625)  # steps 4-6: median 0.625
    assert f["evidence"]["peak"] == pytest.approx(0.625) and f["evidence"]["last"] == pytest.approx(0.476, abs=1e-3)
    assert f["evidence"]["experts"] == 4 and f["evidence"]["high_values"] == 4  # the last step's shares: 4 again
    assert "3 experts" not in f["message"] and "4 experts" in f["message"]
    one_by_one = [{n: Series(n, [s], [v])} for s, n, v in ((e.step, e.name, e.value) for e in scalars(list(cols.values())))]
    assert findings(cfg, one_by_one) == [f]


def reference(columns: dict[str, Series], gini: float) -> tuple[int, float, float, int, int, list[float]] | None:
    """What window 1 finds, step by step in plain Python: each step's loads (an expert's last
    finite value there), the scaled Gini of the present experts' shares (at least 2, total > 0,
    none negative), groups by name; the first at or above ``gini`` fires. Its (step, Gini, peak,
    peak step, values at or above, latest shares) of that group."""
    steps = sorted({s for c in columns.values() for s in c.steps})
    fired: tuple[int, str, float] | None = None
    peak, high, shares = (0, -INF), 0, {}
    for step in steps:
        groups: dict[str, dict[str, float]] = {}
        for name in sorted(columns, key=lambda n: (int(n.rpartition(".")[2]), n)):
            c = columns[name]
            vals = [v for s, v in zip(c.steps, c.values) if s == step and math.isfinite(v)]
            if vals:
                groups.setdefault(name.rpartition(".")[0], {})[name] = vals[-1]
        for group in sorted(groups):
            xs = list(groups[group].values())
            total = sum(xs)
            if len(xs) < 2 or total <= 0 or min(xs) < 0:
                continue
            sh = [x / total for x in xs]
            shares[group] = sh
            e = len(sh)
            g = sum((2 * (i + 1) - e - 1) * s for i, s in enumerate(sorted(sh))) / e * e / (e - 1)
            if fired is None and g >= gini:
                fired, peak, high = (step, group, g), (step, g), 1
            elif fired is not None and group == fired[1]:
                peak = (step, g) if g > peak[1] else peak
                high += g >= gini
    if fired is None:
        return None
    return fired[0], fired[2], peak[1], peak[0], high, shares[fired[1]]


# ---- random runs ------------------------------------------------------------------------------------
VALUE = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 10.0, 100.0, 1e-3, 1e300, NAN, INF, -1.0]),
                  st.floats(0, 1e3))


@st.composite
def loads(draw: Callable[..., Any]) -> dict[str, Series]:
    """Per-expert load columns of one or two layer groups, each expert on its own steps (missing at
    some, duplicate steps, NaN, negative), sometimes with a logged router entropy."""
    n = draw(st.integers(0, 30))
    gaps = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))  # 0: a duplicate step
    steps = [sum(gaps[:i]) for i in range(n)]
    out: dict[str, Series] = {}
    for group in draw(st.sampled_from([["expert_load"], ["expert_load.a", "expert_load.b"]])):
        for k in range(draw(st.integers(2, 5))):
            hot = draw(st.booleans())  # this expert takes most tokens
            mine = [s for s in steps if draw(st.integers(0, 5))]  # missing at some steps
            vals = [draw(VALUE) * (30 if hot else 1) for _ in mine]
            out[f"{group}.{k}"] = Series(f"{group}.{k}", mine, vals)
    if draw(st.booleans()):
        out["expert_entropy"] = Series("expert_entropy", sorted(set(steps)),
                                       [2.0 * 0.97 ** i for i in range(len(set(steps)))])
    return out


def deliveries(columns: dict[str, Series], cuts: list[int], resume: int | None,
               cfg: ExpertCollapse.Config) -> list[dict[str, Any]]:
    """The points as live sends them (step order), the engine cut at ``cuts`` (inside a step
    too) and, at ``resume``, a new process restored from the old one's state."""
    engine = Engine([ExpertCollapse(cfg)])
    for i, ev in enumerate(scalars(list(columns.values()))):
        if i == resume:
            state = engine.state_dict()
            engine = Engine([ExpertCollapse(cfg)])
            engine.load_state_dict(state)
        engine.feed(Scalar(ev.step, ev.name, ev.value))
        if i in cuts:
            engine.flush()
    report = engine.finish()
    assert report.disabled == []
    return [dataclasses.asdict(f) for f in report.findings]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cols=loads(), window=st.integers(1, 4), gini=st.sampled_from([0.3, 0.6, 0.9]),
       cuts=st.lists(st.integers(0, 150), max_size=8), resume=st.one_of(st.none(), st.integers(0, 150)))
def test_random_loads_judged_the_same_however_delivered(cols: dict[str, Series], window: int, gini: float,
                                                        cuts: list[int], resume: int | None) -> None:
    cfg = config(list(cols), window=window, min_points=min(2, window), gini=gini)
    engine = Engine([ExpertCollapse(cfg)])
    for c in cols.values():
        engine.feed(c)
    report = engine.finish()
    assert report.disabled == []
    whole = [dataclasses.asdict(f) for f in report.findings]
    got = deliveries(cols, cuts, resume, cfg)
    assert same(got, whole), (got, whole)
    if window == 1 and "expert_entropy" not in cols:  # each step's Gini, checked in plain Python
        want = reference(cols, gini)
        if want is None:
            assert whole == []
        else:
            (f,) = whole
            ev = f["evidence"]
            assert (f["step"], ev["gini"], ev["peak"], ev["peak_step"], ev["high_values"], ev["shares"]) == want
