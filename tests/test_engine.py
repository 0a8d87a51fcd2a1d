"""The engine and the event vocabulary, without torch."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Iterator

import pytest

from traindoc import events, record
from traindoc.detectors import Detector, build
from traindoc.detectors._common import finding
from traindoc.engine import Engine
from traindoc.events import RunEnd, RunStart, Scalar
from traindoc.findings import Finding


class Exploding(Detector):
    id = "divergence"
    needs = frozenset({"loss"})

    def observe(self, event: events.Event) -> Iterator[Finding]:
        raise ZeroDivisionError("bug in a detector")


class Refining(Detector):
    id = "loss-spike"
    needs = frozenset({"loss"})

    def __init__(self) -> None:
        self.n = 0

    def observe(self, event: events.Event) -> Iterator[Finding]:
        self.n += 1
        yield finding(self.id, step=getattr(event, "step", None), message=f"seen {self.n}", cause="c", fix="f")


def test_a_crashing_detector_is_disabled_and_the_rest_go_on() -> None:
    announced: list[Finding] = []
    engine = Engine([Exploding(), Refining()], on_finding=announced.append)
    for step in range(3):
        engine.feed(Scalar(step=step, name="loss", value=1.0))
    report = engine.finish()
    assert [i for i, _ in report.disabled] == ["divergence"]
    assert "ZeroDivisionError: bug in a detector" in report.disabled[0][1]
    assert report.ran == ["loss-spike"]
    # announced once, at its first step; the stored finding carries the latest evidence
    assert [f.message for f in announced] == ["seen 1"]
    assert report.findings[0].message == "seen 3" and report.findings[0].step == 0


def test_not_applicable_says_which_signal_was_missing() -> None:
    engine = Engine(build(select=["clipping-every-step", "loss-spike"]))
    engine.feed(RunStart(source="logs"))
    engine.feed(Scalar(step=0, name="loss", value=1.0))
    report = engine.finish()
    assert report.ran == ["loss-spike"]
    (na,) = report.not_applicable
    assert na[0] == "clipping-every-step" and "clip_grad_norm_" in na[1]


class ReadsErrors(Detector):
    """Judges val_loss and, by name, every error metric a run names itself."""

    id = "metric-divergence"
    needs = frozenset({"val_loss"})

    def __init__(self) -> None:
        self.got: list[str] = []

    def reads(self, signal: str) -> bool:
        return signal.endswith("_mae")

    def observe(self, event: events.Event) -> None:
        assert isinstance(event, Scalar)
        self.got.append(event.name)


def test_a_signal_a_detector_reads_by_name_is_routed_to_it_and_makes_it_applicable() -> None:
    det = ReadsErrors()
    engine = Engine([det])
    assert not engine.wants("metric.val_acc") and engine.wants("metric.val_mae")
    for name in ("metric.val_acc", "metric.val_mae", "metric.train_mae", "metric.val_mae"):
        engine.feed(Scalar(step=0, name=name, value=1.0))
    assert det.got == ["metric.val_mae", "metric.train_mae", "metric.val_mae"]
    assert engine.finish().ran == ["metric-divergence"]  # its needs stood in for

    quiet = Engine([ReadsErrors()])
    quiet.feed(Scalar(step=0, name="metric.val_acc", value=1.0))
    assert quiet.finish().not_applicable == [("metric-divergence", "this run showed no val_loss (val_loss)")]


def test_a_source_that_declares_a_read_signal_keeps_the_detector_routed() -> None:
    kept, dropped = ReadsErrors(), ReadsErrors()
    for det, signals in ((kept, ("loss", "metric.val_mae")), (dropped, ("loss", "metric.val_acc"))):
        engine = Engine([det])
        engine.feed(RunStart(source="logs", signals=signals))
        engine.feed(Scalar(step=0, name="metric.val_mae", value=1.0))
    assert kept.got == ["metric.val_mae"] and dropped.got == []


class ReadsBadly(ReadsErrors):
    def reads(self, signal: str) -> bool:
        raise KeyError(signal)


def test_a_detector_whose_reads_raises_is_disabled_not_the_run() -> None:
    engine = Engine([ReadsBadly(), Refining()])
    engine.feed(Scalar(step=0, name="metric.val_mae", value=1.0))
    engine.feed(Scalar(step=0, name="loss", value=1.0))
    report = engine.finish()
    assert [i for i, _ in report.disabled] == ["metric-divergence"] and report.ran == ["loss-spike"]


def test_ignored_ids_are_not_reported() -> None:
    engine = Engine([Refining()], ignore=["loss-spike"])
    engine.feed(Scalar(step=0, name="loss", value=1.0))
    assert engine.finish().findings == []


SAMPLES = [
    events.RunStart(source="live", script="t.py", argv=("a",), world_size=2),
    events.Optimizer(step=0, index=0, cls="AdamW", groups=(events.ParamGroup(
        index=0, lr=1e-3, names=("w",), dtypes=("torch.float32",), numel=3),)),
    events.Scalar(step=1, name="loss", value=math.nan),
    events.Backward(step=1, value=1.0, constant=True, micro=1, where="t.py:3"),
    events.ParamStats(step=2, name="w", dtype="torch.bfloat16", numel=3, requires_grad=True,
                      norm=math.inf, grad=None, has_grad=False, update=0.0, unchanged=1.0),
    events.Activation(step=0, module="net.0", type="Linear", nan=True, is_output=True),
    events.Clip(step=0, norm=3.0, max_norm=1.0),
    events.Batch(step=0, loader="TensorDataset", iterator=1, index=0, fingerprint="ab"),
    events.Classification(step=0, classes=10, value=2.3),
    events.Cast(module="Net", dtype="torch.bfloat16", where="t.py:9"),
    events.RunEnd(steps=3, status="exit"),
]


def test_every_event_kind_has_a_sample() -> None:
    covered = {type(e) for e in SAMPLES}
    core = {events.RunStart, events.Optimizer, events.Scalar, events.Backward, events.ParamStats,
            events.Activation, events.Clip, events.Batch, events.Classification, events.Cast, events.RunEnd}
    assert core <= covered


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_events_round_trip_through_jsonl(event: events.Event, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    rec = record.Recorder(path)
    rec(event)
    rec.close()
    (back,) = list(record.read(path))
    a, b = dataclasses.asdict(event), dataclasses.asdict(back)
    assert type(back) is type(event)
    assert {k: v for k, v in a.items() if v == v} == {k: v for k, v in b.items() if v == v}
    assert [k for k, v in a.items() if v != v] == [k for k, v in b.items() if v != v]  # NaN kept


def test_unknown_event_kind_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"kind": "nope"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: not a traindoc event: unknown event kind 'nope'"):
        list(record.read(path))


def test_report_run_block() -> None:
    engine = Engine([])
    engine.feed(RunStart(source="live", script="t.py", argv=("x",), world_size=4))
    engine.feed(RunEnd(steps=7, duration_s=1.5, status="exception"))
    run = engine.finish().run
    assert run["script"] == "t.py" and run["ranks"] == 4 and run["steps"] == 7 and run["status"] == "exception"
