"""Each reader on files written by the real libraries (tests/fixtures/logs, see
make_fixtures.py), against an independent parse of the same file where one exists."""

from __future__ import annotations

import csv
import json
import math
import struct
from pathlib import Path

import pytest

from traindoc.errors import UsageError
from traindoc.events import columns
from traindoc.events import scalars
from traindoc.events import RunEnd, RunStart, Scalar, Series
from traindoc.sources import logs
from traindoc.sources.logs import tensorboard

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def series(log: logs.Log, signal: str) -> tuple[list[int], list[float]]:
    col = log.map.column_of(signal)
    assert col is not None, f"{signal} not mapped ({log.map.signal_of})"
    s = log.table.series[col]
    return s.steps, s.values


# ------------------------------------------------------------------------------------- CSV
def test_seed000_training_log() -> None:
    log = logs.load([FIX / "seeds" / "seed000_healthy.csv"])
    t = log.table
    assert (t.format, t.x, t.x_column) == ("csv", "epoch", "Epoch")
    steps, values = series(log, "loss")
    assert steps == list(range(60))
    with open(FIX / "seeds" / "seed000_healthy.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert values == [float(r["Train_Loss"]) for r in rows]
    assert log.map.unmapped == ["Level", "Train_H"]


def test_lightning_metrics_csv_sparse_rows() -> None:
    path = FIX / "lightning" / "version_0" / "metrics.csv"
    log = logs.load([path.parent])  # the version folder works too
    assert log.table.format == "lightning-csv" and log.table.x == "step"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for signal, column in (("loss", "train_loss_step"), ("val_loss", "val_loss"), ("lr", "lr-AdamW"),
                           ("val_acc", "val_acc")):
        steps, values = series(log, signal)
        want = [(int(r["step"]), float(r[column])) for r in rows if r[column] != ""]
        assert list(zip(steps, values)) == want, signal
    events = list(log.events())
    scalar_steps = [e.step for e in scalars([e for e in events if isinstance(e, Series)])]
    assert scalar_steps == sorted(scalar_steps)  # merged in step order


def test_epoch_column_counted_from_1_is_shifted(tmp_path: Path) -> None:
    p = tmp_path / "log.csv"
    p.write_text("epoch,loss\n1,2.0\n2,1.5\n3,1.2\n")
    log = logs.load([p])
    assert series(log, "loss")[0] == [0, 1, 2]
    assert any("starts at 1" in n for n in log.table.notes)


def test_resumed_csv_keeps_the_later_values(tmp_path: Path) -> None:
    p = tmp_path / "training_log.csv"
    p.write_text("Epoch,Train_Loss\n0,3\n1,2\n2,9\nEpoch,Train_Loss\n1,2.5\n2,1.9\n3,1.7\n")
    log = logs.load([p])
    assert series(log, "loss") == ([0, 1, 2, 3], [3.0, 2.5, 1.9, 1.7])
    notes = " ".join(log.table.notes)
    assert "header row repeats" in notes and "went back from 2 to 1" in notes


def test_quoted_csv_and_semicolons(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text('step;"train loss";note\n0;1,5;"a;b"\n1;1.0;x\n')
    log = logs.load([p])
    # "1,5" is not a number in this reader (no locale guessing): that cell is skipped, with a note
    assert series(log, "loss") == ([1], [1.0])
    assert "note" in log.map.unmapped


def test_no_step_column_numbers_rows(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text("loss,lr\n2,0.1\n1,0.1\n")
    log = logs.load([p])
    assert series(log, "loss")[0] == [0, 1] and log.table.x_column is None


# ----------------------------------------------------------------------------- TensorBoard
def _accumulator(path: Path) -> dict[str, list[tuple[int, float]]]:
    """TensorBoard's own loader, told to keep every point."""
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    out: dict[str, list[tuple[int, float]]] = {}
    acc = ea_mod.EventAccumulator(str(path), size_guidance={ea_mod.SCALARS: 0, ea_mod.TENSORS: 0})
    acc.Reload()
    for tag in acc.Tags()["scalars"]:
        out[tag] = [(e.step, e.value) for e in acc.Scalars(tag)]
    from tensorboard.util import tensor_util

    for tag in acc.Tags()["tensors"]:
        if acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars":
            out[tag] = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
    return out


def test_tensorboard_matches_tensorboards_own_reader() -> None:
    folder = FIX / "tensorboard" / "healthy"
    main = next(p for p in folder.iterdir() if "tfevents" in p.name)
    ours = tensorboard.read(main)
    theirs = _accumulator(main)
    assert set(ours.series) == set(theirs)
    for tag, points in theirs.items():
        if tag in ours.series:
            s = ours.series[tag]
            assert list(s.steps) == [step for step, _ in points], tag
            assert list(s.values) == pytest.approx([value for _, value in points]), tag


def test_tensorboard_folder_with_add_scalars_children() -> None:
    log = logs.load([FIX / "tensorboard" / "healthy"])
    assert log.map.column_of("throughput") == "throughput_train"
    assert series(log, "val_loss")[0] == [49, 99, 149, 199, 249, 299]  # new_style tensors
    assert len(series(log, "loss")[0]) == 300


def test_tensorboard_resumed_run_later_file_wins() -> None:
    log = logs.load([FIX / "tensorboard" / "resumed"])
    steps, values = series(log, "loss")
    assert steps == list(range(200))
    assert values[120] == pytest.approx(2.0 * math.exp(-120 / 80) + 0.5, rel=1e-6)
    assert values[50] == pytest.approx(2.0 * math.exp(-50 / 80), rel=1e-6)


def test_tensorboard_keeps_every_point(tmp_path: Path) -> None:
    """More than the 10,000 points TensorBoard's default loader keeps per tag."""
    path = tmp_path / "events.out.tfevents.1.big"
    _write_events(path, [(s, "loss", float(s % 7)) for s in range(25_000)])
    t = tensorboard.read(path)
    assert t.series["loss"].steps == list(range(25_000))
    assert t.series["loss"].values[-1] == float(24_999 % 7)


def test_tensorboard_mixed_tags_and_large_steps(tmp_path: Path) -> None:
    pts = [(s * 997, tag, s * 0.5) for s in range(3000) for tag in ("a", "bb", "a/c")]
    path = tmp_path / "events.out.tfevents.2"
    _write_events(path, pts)
    t = tensorboard.read(path)
    for tag in ("a", "bb", "a/c"):
        assert t.series[tag].steps == [s * 997 for s in range(3000)]
        assert t.series[tag].values == [s * 0.5 for s in range(3000)]


def test_tensorboard_scalars_interleaved_with_other_records(tmp_path: Path) -> None:
    """Histograms or images between scalar records: the fast path falls back record by record
    around each of them and picks up again after (and stays linear: a 4 MB scan per
    interleaved record used to make this quadratic)."""
    path = tmp_path / "events.out.tfevents.4"
    _write_events(path, [(s, "loss", float(s)) for s in range(20_000)])
    data = path.read_bytes()
    mask = tensorboard._masked_crc
    other_data = b"\x09" + struct.pack("<d", 3.0) + b"\x10\x05\x2a\x0c\x0a\x0a\x0a\x04hist\x42\x02\x08\x07"
    head = struct.pack("<Q", len(other_data))
    other = head + struct.pack("<I", mask(head)) + other_data + struct.pack("<I", mask(other_data))
    out, pos, k = bytearray(), 0, 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        out += data[pos:pos + 16 + length]
        pos += 16 + length
        k += 1
        if k % 7 == 0 or 5000 < k < 5003:
            out += other
    path.write_bytes(bytes(out))
    t = tensorboard.read(path)
    assert t.series["loss"].steps == list(range(20_000))
    assert t.series["loss"].values == [float(s) for s in range(20_000)]
    assert "hist" not in t.series


def test_tensorboard_truncated_last_record_is_a_note(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.3"
    _write_events(path, [(s, "loss", 1.0) for s in range(100)])
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    t = tensorboard.read(path)
    assert len(t.series["loss"]) == 99 and "cut short" in t.notes[0]


def _write_events(path: Path, points: list[tuple[int, str, float]]) -> None:
    """Records in SummaryWriter.add_scalar's exact layout (see benchmarks/logs_speed.py)."""
    mask = tensorboard._masked_crc

    def record(data: bytes) -> bytes:
        head = struct.pack("<Q", len(data))
        return head + struct.pack("<I", mask(head)) + data + struct.pack("<I", mask(data))

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)

    chunks = [record(b"\x09" + struct.pack("<d", 1.0) + b"\x1a\x0dbrain.Event:2")]
    for step, tag, value in points:
        t = tag.encode()
        val = b"\x0a" + bytes([len(t)]) + t + b"\x15" + struct.pack("<f", value)
        summ = b"\x0a" + bytes([len(val)]) + val
        chunks.append(record(b"\x09" + struct.pack("<d", 2.0) + (b"\x10" + varint(step) if step else b"")
                             + b"\x2a" + bytes([len(summ)]) + summ))
    path.write_bytes(b"".join(chunks))


# ---------------------------------------------------------------------------- transformers
def test_trainer_state_json() -> None:
    path = FIX / "hf" / "healthy" / "checkpoint-40" / "trainer_state.json"
    log = logs.load([path])
    history = json.loads(path.read_text())["log_history"]
    steps, values = series(log, "loss")
    want = [(e["step"] - 1, e["loss"]) for e in history if "loss" in e and "train_runtime" not in e]
    assert list(zip(steps, values)) == want  # HF's step counts steps done: 0-based is step - 1
    assert series(log, "val_acc")[1] == [e["eval_accuracy"] for e in history if "eval_accuracy" in e]
    assert log.map.column_of("lr") == "learning_rate" and log.map.column_of("val_loss") == "eval_loss"
    assert "train_loss" not in log.table.series  # the run's mean, not a point of the curve
    assert "eval_runtime" in log.map.ignored


def test_trainer_output_folder_reads_the_latest_checkpoint(tmp_path: Path) -> None:
    src = (FIX / "hf" / "healthy" / "checkpoint-40" / "trainer_state.json").read_text()
    for n in (10, 40, 5):
        (tmp_path / f"checkpoint-{n}").mkdir()
        state = json.loads(src)
        state["log_history"] = [e for e in state["log_history"] if e["step"] <= n]
        (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text(json.dumps(state))
    log = logs.load([tmp_path])
    assert series(log, "loss")[0][-1] == 39
    assert any("checkpoint-40" in n for n in log.table.notes)


def test_nan_in_trainer_state_is_kept() -> None:
    log = logs.load([FIX / "hf" / "nan_hidden" / "checkpoint-40" / "trainer_state.json"])
    _, norms = series(log, "grad_norm")
    assert sum(1 for v in norms if v != v) == 4


# ----------------------------------------------------------------------------------- JSONL
def test_jsonl_nested_objects() -> None:
    log = logs.load([FIX / "jsonl" / "metrics.jsonl"])
    assert log.map.column_of("loss") == "train/loss" and log.map.column_of("val_acc") == "val/acc"
    assert series(log, "val_loss")[0] == [39, 79, 119, 159, 199]


def test_traindoc_stream_is_replayed_as_is() -> None:
    log = logs.load([FIX / "jsonl" / "recorded_run.jsonl"])
    events = list(log.events())
    assert isinstance(events[0], RunStart) and events[0].source == "live"
    assert isinstance(events[-1], RunEnd) and len(events) == 122


def test_jsonl_without_step_and_with_string_numbers(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"loss": "2.5", "tag": "a"}\n{"loss": NaN}\n{"loss": 1.0}\n')
    log = logs.load([p])
    steps, values = series(log, "loss")
    assert steps == [0, 1, 2] and values[0] == 2.5 and values[1] != values[1]
    assert log.map.unmapped == ["tag"]


# ----------------------------------------------------------------------------------- merge
def test_several_paths_are_one_run(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.jsonl"
    a.write_text("step,loss\n0,3\n1,2\n")
    b.write_text('{"step": 2, "loss": 1.5, "lr": 0.1}\n')
    log = logs.load([a, b])
    assert series(log, "loss") == ([0, 1, 2], [3.0, 2.0, 1.5])
    assert log.table.format == "csv+jsonl"


def test_events_are_a_full_stream(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text("step,loss,val_loss\n0,3,\n1,2,2.5\n2,1.5,\n")
    events = list(logs.load([p]).events())
    assert isinstance(events[0], RunStart) and events[0].source == "logs"
    assert list(scalars(events[1:-1])) == [Scalar(0, "loss", 3.0), Scalar(1, "loss", 2.0), Scalar(1, "val_loss", 2.5),
                            Scalar(2, "loss", 1.5)]
    assert events[-1] == RunEnd(steps=3)


def test_fast_scalar_is_a_real_scalar() -> None:
    s = columns._make(3, "loss", 0.5)
    assert type(s) is Scalar and s == Scalar(3, "loss", 0.5) and hash(s) == hash(Scalar(3, "loss", 0.5))
    with pytest.raises(Exception):
        s.value = 1.0  # type: ignore[misc]  # still frozen


def test_x_kinds_must_agree(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("step,loss\n0,3\n")
    b.write_text("epoch,loss\n0,3\n")
    with pytest.raises(UsageError, match="count different things"):
        logs.load([a, b])
