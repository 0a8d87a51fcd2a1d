"""A run resumed in a new process finds what the uninterrupted run finds.

For recorded event streams (the golden ones, and live recordings of zoo cases made here with
``traindoc run --record``), the first part of the stream goes to one engine, its
``state_dict`` goes through ``torch.save`` and ``torch.load(weights_only=True)`` into a fresh
engine (new detectors, as in a new process), which gets the stream's ``RunStart`` again (a
resumed process starts a new session) and the rest. The finding ids and their steps must be
those of one engine fed the whole stream, for splits at several points, and a healthy stream
stays quiet however it is split.

Detectors that carry nothing across by design are left out of the comparison (``NOT_CARRIED``):
what they judge is measured again in the new process and belongs to it.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from conftest import GOLDEN, ROOT, warm_traindoc

from traindoc import detectors
from traindoc.engine import Engine, Report
from traindoc.events import Event, RunStart
from traindoc.record import read

# Wall times of the old process: a resumed process has its own loader workers, caches and
# evaluation cost, and judging it on the old process's timings would blame the new one.
NOT_CARRIED = {
    "data-starvation": "the loader's wait per step is measured anew in each process",
    "slow-eval": "evaluation and training times are measured anew in each process",
    "straggler-rank": "each rank's step times are measured anew in each process",
    # Its detector keeps no state yet: a split at a window's boundary judges a window of fewer
    # steps (the stream carries one rank_loss window per rank and per 10 steps).
    "rank-loss-skew": "keeps no state across a resume yet",
}
SPLITS = (0.1, 0.25, 0.5, 0.75, 0.9)  # where the first part ends, as a share of the run's steps

# Live zoo cases whose judgement needs history from before a split (each fails the comparison
# when the engine's state leaves its detectors out), and healthy ones that a cut history made
# fire falsely (healthy_gan: stalled-loss; healthy_label_order: loss-spike).
ZOO_FIRING = ("amp_scaler_collapse", "ckpt_incomplete", "ckpt_not_atomic", "degenerate_threshold_sparse",
              "exploding_acyclicity", "frozen_temperature", "missing_zero_grad", "muon_low_lr",
              "saturated_dag_scale", "step_no_op_cached", "val_at_chance_label_order")
ZOO_HEALTHY = ("healthy_gan", "healthy_label_order", "healthy_mlp")
GOLDEN_HEALTHY = ("healthy_noisy_loss", "healthy_ranks", "healthy_rank_losses")


def whole(events: list[Event]) -> Report:
    engine = Engine(detectors.build())
    for ev in events:
        engine.feed(ev)
    return engine.finish()


def split_at(events: list[Event], step: int) -> int | None:
    """The index of the first event of ``step`` or later (the resumed process's first)."""
    for i, ev in enumerate(events):
        at = getattr(ev, "step", None)
        if i and isinstance(at, int) and at >= step:
            return i
    return None


def resumed(events: list[Event], i: int) -> Report:
    """Events before ``i`` in one engine, the rest in a fresh one restored from its state."""
    first = Engine(detectors.build())
    for ev in events[:i]:
        first.feed(ev)
    buf = io.BytesIO()
    torch.save({"traindoc": first.state_dict()}, buf)
    buf.seek(0)
    second = Engine(detectors.build())
    second.load_state_dict(torch.load(buf, weights_only=True)["traindoc"])
    again = [events[0]] if isinstance(events[0], RunStart) else []
    for ev in again + events[i:]:
        second.feed(ev)
    return second.finish()


def found(report: Report) -> dict[str, int | None]:
    return {f.id: f.step for f in report.findings if f.id not in NOT_CARRIED}


def splits(events: list[Event]) -> list[tuple[int, int]]:
    """(step, index) of each split point."""
    steps = [getattr(ev, "step", None) for ev in events]
    last = max((s for s in steps if isinstance(s, int)), default=0)
    out = []
    for share in SPLITS:
        step = max(1, int(last * share))
        i = split_at(events, step)
        if i is not None and (step, i) not in out:
            out.append((step, i))
    return out


def check(events: list[Event], healthy: bool) -> None:
    expected = found(whole(events))
    if healthy:
        assert expected == {}, "a healthy stream fires uninterrupted: fix that first"
    assert splits(events), "the stream has no step to split at"
    for step, i in splits(events):
        got = found(resumed(events, i))
        assert got == expected, f"resumed at step {step}: {got}, uninterrupted: {expected}"


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.jsonl")), ids=lambda p: p.stem)
def test_a_golden_stream_split_finds_what_it_finds_whole(path: Path) -> None:
    check(list(read(path)), healthy=path.stem in GOLDEN_HEALTHY)


@pytest.fixture(scope="module")
def zoo_streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Event]]:
    """Each zoo case run live once, its event stream recorded."""
    folder = tmp_path_factory.mktemp("streams")
    out = {}
    for name in ZOO_FIRING + ZOO_HEALTHY:
        path = folder / f"{name}.jsonl"
        done = warm_traindoc("run", "--record", str(path), str(ROOT / "zoo" / f"{name}.py"), timeout=300)
        assert path.exists(), f"{name}: no record ({done.returncode}): {done.stderr[-2000:]}"
        out[name] = list(read(path))
    return out


@pytest.mark.parametrize("name", ZOO_FIRING + ZOO_HEALTHY)
def test_a_live_stream_split_finds_what_it_finds_whole(name: str, zoo_streams: dict[str, list[Event]]) -> None:
    check(zoo_streams[name], healthy=name in ZOO_HEALTHY)


def test_the_comparison_fails_without_the_detectors_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check has teeth: with the engine's findings carried but no detector's state, a
    spike that straddles the split is lost."""
    load = Engine.load_state_dict

    def without_detectors(self: Engine, state: dict[str, object]) -> None:
        load(self, {**state, "detectors": {}})

    monkeypatch.setattr(Engine, "load_state_dict", without_detectors)
    with pytest.raises(AssertionError, match="resumed at step"):
        check(list(read(GOLDEN / "loss_spike.jsonl")), healthy=False)


def round_trips(events: list[Event]) -> None:
    """Each detector's state after ``events`` is in the engine's state (plain data), and loaded
    into a fresh detector through weights_only gives the same state back."""
    fed = detectors.build()
    engine = Engine(fed)
    for ev in events:
        engine.feed(ev)
    carried = engine.state_dict()["detectors"]
    for det in fed:
        state = det.state_dict()
        if not state:  # it carries nothing
            continue
        assert isinstance(carried, dict) and det.id in carried, f"{det.id}: its state is not plain data"
        buf = io.BytesIO()
        torch.save(state, buf)
        buf.seek(0)
        fresh = type(det)(det.config)  # type: ignore[attr-defined]
        fresh.load_state_dict(torch.load(buf, weights_only=True))
        assert repr(fresh.state_dict()) == repr(state), det.id


def test_each_detector_state_round_trips(zoo_streams: dict[str, list[Event]]) -> None:
    for events in [*zoo_streams.values(), *(list(read(p)) for p in sorted(GOLDEN.glob("*.jsonl")))]:
        round_trips(events)


@pytest.mark.parametrize("state", [
    {"_gone": 1},  # an attribute this version does not carry
    {"_recent": {"__carry__": "object", "class": "Popen", "v": {}}},  # a class it does not name
    {"_ema": {"__carry__": "ema", "v": "?"}},  # a value of the wrong shape
], ids=["unknown-name", "unnamed-class", "bad-shape"])
def test_a_state_of_another_version_leaves_the_detector_fresh(state: dict[str, object]) -> None:
    det = detectors.by_id()["loss-spike"]()
    before = dict(vars(det))
    Engine([det]).load_state_dict({"version": 1, "detectors": {"loss-spike": state}})
    assert vars(det).keys() == before.keys()
    assert all(vars(det)[k] is v for k, v in before.items())
