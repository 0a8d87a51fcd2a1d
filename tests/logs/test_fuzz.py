"""Fuzzing the readers: whatever the bytes, `traindoc logs` gives a report or a UsageError,
never another exception, and never a detector crash. Inputs that found bugs are kept as
explicit cases at the end."""

from __future__ import annotations

import json
import math
import os
import string
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traindoc.analyze import analyze
from traindoc.errors import UsageError
from traindoc.events import scalars
from traindoc.events import Series
from traindoc.sources import logs
from traindoc.sources.logs import tensorboard

# TRAINDOC_FUZZ=2000 for a long hunt; the default keeps the suite fast.
SETTINGS = settings(max_examples=int(os.environ.get("TRAINDOC_FUZZ", "40")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
NAMES = ["step", "epoch", "loss", "val_loss", "lr", "grad_norm", "val_acc", "train_acc", "Val_F1",
         "Expert_Gini", "Train_MAE", "foo", "", "loss", "Level", "eval_loss"]


def check(path: Path) -> None:
    """Load and analyze; only UsageError may escape, and no detector may crash."""
    try:
        log = logs.load([path])
    except UsageError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    events = list(log.events())
    steps = [e.step for e in scalars([e for e in events if isinstance(e, Series)])]
    if log.table.events is None:
        assert steps == sorted(steps)
    report = analyze(events)
    assert not report.disabled, report.disabled


# ------------------------------------------------------------------------------- raw bytes
@SETTINGS
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".csv", ".json", ".jsonl", ".txt", ""]))
def test_any_bytes(tmp_path: Path, data: bytes, suffix: str) -> None:
    p = tmp_path / f"log{suffix}"
    p.write_bytes(data)
    check(p)


@SETTINGS
@given(text=st.text(alphabet=string.printable, max_size=400), suffix=st.sampled_from([".csv", ".jsonl", ".json"]))
def test_any_text(tmp_path: Path, text: str, suffix: str) -> None:
    p = tmp_path / f"log{suffix}"
    p.write_text(text)
    check(p)


# ------------------------------------------------------------------------------------- CSV
cell = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "", "nan", "inf", "-inf", "1e400", "abc", " 3 ", "1,5", '"q"', "0x10"]),
)


@SETTINGS
@given(header=st.lists(st.sampled_from(NAMES), min_size=1, max_size=6),
       rows=st.lists(st.lists(cell, min_size=0, max_size=7), max_size=30),
       delim=st.sampled_from([",", "\t", ";"]), trailing=st.booleans())
def test_csv(tmp_path: Path, header: list[str], rows: list[list[str]], delim: str, trailing: bool) -> None:
    text = "\n".join(delim.join(r) for r in [header, *rows]) + ("\n" if trailing else "")
    p = tmp_path / "log.csv"
    p.write_text(text)
    check(p)


# ----------------------------------------------------------------------------------- JSONL
scalar = st.one_of(st.integers(), st.integers(-10**500, 10**500), st.floats(), st.text(max_size=5),
                   st.booleans(), st.none())
obj = st.dictionaries(st.sampled_from(NAMES + ["train/loss", "_step"]),
                      st.one_of(scalar, st.dictionaries(st.sampled_from(["loss", "acc"]), scalar, max_size=2)),
                      max_size=6)


@SETTINGS
@given(objs=st.lists(obj, max_size=25))
def test_jsonl(tmp_path: Path, objs: list[dict[str, object]]) -> None:
    p = tmp_path / "log.jsonl"
    p.write_text("".join(json.dumps(o) + "\n" for o in objs))
    check(p)


@SETTINGS
@given(entries=st.lists(st.dictionaries(
    st.sampled_from(["loss", "grad_norm", "learning_rate", "epoch", "step", "eval_loss", "eval_accuracy",
                     "train_runtime", "total_flos", "train_loss"]), scalar, max_size=6), max_size=20))
def test_trainer_state(tmp_path: Path, entries: list[dict[str, object]]) -> None:
    p = tmp_path / "trainer_state.json"
    p.write_text(json.dumps({"log_history": entries, "global_step": 1}))
    check(p)


# ----------------------------------------------------------------------------- TensorBoard


points_st = st.lists(st.tuples(st.integers(0, 2**40), st.sampled_from(["loss", "lr", "a/b", "x" * 130]),
                               st.floats(width=32)), max_size=40)


@SETTINGS
@given(points=points_st, cut=st.integers(0, 10**6), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3))
def test_tensorboard_mutated(tmp_path: Path, points: list[tuple[int, str, float]], cut: int,
                             flips: list[tuple[int, int]]) -> None:
    data = bytearray(event_file(points))
    for at, byte in flips:
        data[at % len(data)] = byte
    data = data[: max(12, len(data) - cut % max(1, len(data)))]
    p = tmp_path / "events.out.tfevents.fuzz"
    p.write_bytes(bytes(data))
    check(p)


@SETTINGS
@given(points=points_st)
def test_tensorboard_round_trip(tmp_path: Path, points: list[tuple[int, str, float]]) -> None:
    p = tmp_path / "events.out.tfevents.rt"
    p.write_bytes(event_file(points))
    t = tensorboard.read(p) if points else None
    if t is None:
        with pytest.raises(UsageError, match="holds no scalars"):
            tensorboard.read(p)
        return
    for tag in {tag for _, tag, _ in points}:
        want = [(s, v) for s, g, v in points if g == tag]
        got = list(zip(t.series[tag].steps, t.series[tag].values))
        assert len(got) == len(want)
        for (s1, v1), (s2, v2) in zip(got, want):
            assert s1 == s2 and (v1 == v2 or (math.isnan(v1) and math.isnan(v2)))


def event_file(points: list[tuple[int, str, float]]) -> bytes:
    """add_scalar's record layout (long tags take the general decoder)."""
    mask = tensorboard._masked_crc

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def record(data: bytes) -> bytes:
        head = struct.pack("<Q", len(data))
        return head + struct.pack("<I", mask(head)) + data + struct.pack("<I", mask(data))

    chunks = [record(b"\x09" + struct.pack("<d", 1.0) + b"\x1a\x0dbrain.Event:2")]
    for step, tag, value in points:
        t = tag.encode()
        val = b"\x0a" + varint(len(t)) + t + b"\x15" + struct.pack("<f", value)
        summ = b"\x0a" + varint(len(val)) + val
        chunks.append(record(b"\x09" + struct.pack("<d", 2.0) + (b"\x10" + varint(step) if step else b"")
                             + b"\x2a" + varint(len(summ)) + summ))
    return b"".join(chunks)


# -------------------------------------------------------------- cases fuzzing found (kept)
def test_found_duplicate_and_empty_header_names(tmp_path: Path) -> None:
    p = tmp_path / "log.csv"
    p.write_text("loss,,loss\n1,2,3\n")
    log = logs.load([p])
    assert list(log.table.series) == ["loss", "column_2", "loss_2"]
    assert log.map.column_of("loss") == "loss"


def test_found_integers_beyond_float_range(tmp_path: Path) -> None:
    """A JSON integer too large for a float as the step (it used to raise OverflowError) or as a
    value (it is infinite as a float, so nonfinite reports it)."""
    huge = "1" + "0" * 400
    p = tmp_path / "log.jsonl"
    p.write_text(f'{{"step": {huge}, "loss": 1}}\n{{"step": 2, "loss": {huge}}}\n')
    log = logs.load([p])
    assert log.table.series["loss"].values == [math.inf]
    state = tmp_path / "trainer_state.json"
    state.write_text(f'{{"log_history": [{{"step": {huge}, "loss": 1}}]}}')
    with pytest.raises(UsageError, match="no value with a usable step"):  # no logger writes it
        logs.load([state])
    state.write_text(f'{{"log_history": [{{"step": {huge}, "loss": 1}}, {{"step": 3, "loss": 2}}]}}')
    assert logs.load([state]).table.series["loss"].steps == [2]


def test_found_control_characters_in_names_stay_on_one_line(tmp_path: Path) -> None:
    """A corrupt byte turned a tag into "\\noss": the error message must stay one line."""
    p = tmp_path / "log.jsonl"
    p.write_text('{"step": 0, "\\noss": 1.0}\n')
    with pytest.raises(UsageError) as exc:
        logs.load([p])
    assert "\n" not in str(exc.value) and "\\noss" in str(exc.value)


def test_found_negative_steps_only(tmp_path: Path) -> None:
    """``epoch,epoch`` with the row ``-1``: every step negative used to crash on min([])."""
    p = tmp_path / "log.csv"
    p.write_text("epoch,epoch\n-1\n")
    with pytest.raises(UsageError, match="no step >= 0"):
        logs.load([p])
    p.write_text("step,loss\n-1,5\n0,4\n1,3\n")
    log = logs.load([p])
    assert log.table.series["loss"].steps == [0, 1]
    assert any("negative step" in n for n in log.table.notes)
