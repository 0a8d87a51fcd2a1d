"""The readers' fast paths (bulk parsing with numpy) give exactly the Table of the general
paths: same series in the same order, same steps, values bit for bit (nan, inf, -0.0), same
notes, x column and non-numeric columns; and they are taken on the files they are for."""

from __future__ import annotations

import functools
import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traindoc.errors import UsageError
from traindoc.sources.logs import _csv_fast, csv_file, tensorboard
from traindoc.sources.logs._table import Table

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
SETTINGS = settings(max_examples=int(os.environ.get("TRAINDOC_FUZZ", "150")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def bits(values: list[float]) -> list[bytes]:
    assert all(type(v) is float for v in values)
    return [struct.pack("<d", v) for v in values]


def assert_same(fast: Table, general: Table) -> None:
    assert (fast.format, fast.files, fast.x, fast.x_column) == (general.format, general.files, general.x,
                                                              general.x_column)
    assert fast.notes == general.notes
    assert fast.non_numeric == general.non_numeric
    assert fast.events == general.events
    assert list(fast.series) == list(general.series)
    for name, g in general.series.items():
        f = fast.series[name]
        assert all(type(s) is int for s in f.steps), name
        assert f.steps == g.steps, name
        assert bits(f.values) == bits(g.values), name
    # finish() trusts the fast path's "ordered": it must be what finish() would find.
    for t in (fast, general):
        t.finish()
    assert fast.notes == general.notes
    assert {n: (s.steps, bits(s.values)) for n, s in fast.series.items()} == \
        {n: (s.steps, bits(s.values)) for n, s in general.series.items()}


def both_csv(path: Path, text: str, x_override: tuple[str, str] | None = None,
             data: bytes | None = None) -> Table | None:
    """The fast path's Table after checking it against the general path's; None when the fast
    path leaves the file to the general one."""
    try:
        fast = csv_file._read_fast(path, text, x_override, data)
    except UsageError as exc:  # only the --map column check may raise, worded as the general path
        with pytest.raises(UsageError) as general_exc:
            csv_file._read_general(path, text, x_override)
        assert str(general_exc.value) == str(exc)
        return None
    if fast is None:
        return None
    assert_same(fast, csv_file._read_general(path, text, x_override))
    return fast


# ------------------------------------------------------------------------------------- CSV
CSV_FIXTURES = sorted(FIX.rglob("*.csv"))


@pytest.mark.parametrize("path", CSV_FIXTURES, ids=[p.name for p in CSV_FIXTURES])
def test_csv_fixtures_same_table(path: Path) -> None:
    raw = path.read_bytes()
    text = raw.decode("utf-8-sig")
    both_csv(path, text)
    both_csv(path, text, data=raw)
    header = text.splitlines()[0]
    for col in header.split(","):
        both_csv(path, text, ("step", col.strip()))
        both_csv(path, text, ("epoch", col.strip()))


def test_fast_path_taken_on_plain_logs(tmp_path: Path) -> None:
    """The files the fast path is for do take it (so the equality tests are not vacuous)."""
    p = tmp_path / "log.csv"
    plain = "step,loss,lr\n" + "".join(f"{s},{2.5 / (s + 1):.6g},{3e-4 * s:g}\n" for s in range(500))
    lightning = ("epoch,step,train_loss,val_loss\n"
                 + "".join(f"0,{s},{1 / (s + 1)!r},\n" if s % 10 else f"0,{s},,{s / 7:.4f}\n" for s in range(300)))
    for text in (plain, lightning, plain.rstrip("\n"), plain + "1000,0.5"):
        assert both_csv(p, text) is not None, text[:40]
    assert both_csv(p, lightning).format == "lightning-csv"  # type: ignore[union-attr]
    assert both_csv(p, plain + "1000,0.5").notes  # type: ignore[union-attr]  # the cut last line
    seeds = [f for f in CSV_FIXTURES if both_csv(f, f.read_text()) is not None]
    assert len(seeds) >= 3, seeds


def test_read_takes_the_fast_path_on_long_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "log.csv"
    calls = []
    fast = csv_file._read_fast
    monkeypatch.setattr(csv_file, "_read_fast", lambda *a, **k: calls.append(fast(*a, **k)) or calls[-1])
    short = "step,loss\n" + "".join(f"{s},{1 / (s + 1):.5g}\n" for s in range(100))
    long = "step,loss\n" + "".join(f"{s},{1 / (s + 1):.5g}\n" for s in range(csv_file._BULK_ROWS))
    assert_same(csv_file.read(p, short), csv_file._read_general(p, short, None))
    assert calls == [None]  # a short file: the general path is the faster one
    assert_same(csv_file.read(p, long), csv_file._read_general(p, long, None))
    assert calls[-1] is not None


@pytest.mark.parametrize("text", [
    'step,loss\n1,"2"\n',  # quotes
    "step,loss\r\n1,2\r\n",  # CRLF
    "step,loss\n1,2\n\n3,4\n",  # a blank line
    "step,loss\n1,2\n3\n",  # a short row
    "step,loss\n1,2,3\n",  # a long row
    "step,loss\n1,abc\n",  # a text cell
    "1,2\n1,2\n3,4\n",  # a numeric header (its repeats would look like data)
    "\nstep,loss\n1,2\n",  # a blank first line
    "step,loss\n1,2\n  ",  # whitespace after the last newline
    "step,loss\n1,\u00b5\n",  # non-ASCII in the rows
])
def test_fast_path_leaves_the_rest_to_the_general_one(tmp_path: Path, text: str) -> None:
    assert csv_file._read_fast(tmp_path / "log.csv", text, None) is None


def test_number_formats_exact(tmp_path: Path) -> None:
    """Cells in every format a logger writes: the fast path's numbers are float()'s, bit for bit."""
    cells = ["0", "-0", "+0", "-0.0", "007", "1.", ".5", "-.5", "+1.5", "1e5", "1E+05", "1e-05", "-1.5e-300",
             "1e308", "1e309", "2.2250738585072014e-308", "5e-324", "123456789012345", "1234567890123456",
             "0.30000000000000004", "9007199254740993", "1.7976931348623157e308", "nan", "-nan", "inf",
             "-Infinity", " 1.5", "1_000", "1e22", "1e23", "4.35e-22", "9999999999999999e-22", "0e999",
             "0.000001", "1e-7", "3.0517578125e-05", "12345678901234567890", ""]
    text = "step,x\n" + "".join(f"{i},{c}\n" for i, c in enumerate(cells))
    grid, _ = _csv_fast.split(text, "step,x", ",")  # type: ignore[misc]
    got = _csv_fast.numbers(grid, 1)
    assert got is not None and got.empty is not None
    for i, c in enumerate(cells):
        if c:
            assert struct.pack("<d", got.values[i]) == struct.pack("<d", float(c)), c
    assert [bool(e) for e in got.empty] == [c == "" for c in cells]


NUMBERS_ODD = ["nan", "inf", "-inf", "1e400", "-0", "+3", ".5", "5.", "1E5", " 3 ", "1_0", "NaN", "1e-400"]
NOT_NUMBERS = ["1e", "e1", ".", "-", "1.2.3", "1e+-5", "0x10", "abc", "x", "None", "true", "  "]


def number_cell(draw: st.DrawFn, plain: bool) -> str:
    kind = draw(st.sampled_from(["int", "repr", "g", "e", "f", "odd", "empty"] + ([] if plain else ["text"])))
    x = draw(st.floats(allow_nan=False, allow_infinity=False, width=draw(st.sampled_from([32, 64]))))
    if kind == "int":
        return str(draw(st.integers(-10**20, 10**20)))
    if kind == "repr":
        return repr(x)
    if kind in ("g", "e", "f"):
        return f"{x:.{draw(st.integers(0, 17))}{kind}}" if kind != "f" or abs(x) < 1e30 else repr(x)
    if kind == "odd":
        return draw(st.sampled_from(NUMBERS_ODD))
    if kind == "text":
        return draw(st.sampled_from(NOT_NUMBERS))
    return ""


@st.composite
def csv_text(draw: st.DrawFn) -> str:
    """A metrics CSV: mostly plain (numbers, the fast path's case), sometimes not."""
    ncol = draw(st.integers(2, 5))
    header = draw(st.lists(st.sampled_from(["step", "epoch", "loss", "lr", "val_loss", "Step", "", "1",
                                            "e", "global_step", "train/loss", " loss "]),
                           min_size=ncol, max_size=ncol))
    delim = draw(st.sampled_from([",", ",", "\t", ";", "|"]))
    plain = draw(st.booleans())
    x_kind = draw(st.sampled_from(["steps", "steps", "epochs", "floats", "any"]))
    rows = []
    for i in range(draw(st.integers(0, 25))):
        row = [number_cell(draw, plain) for _ in range(ncol)]
        if x_kind == "steps":
            row[0] = str(draw(st.sampled_from([i, i * 10, i - 3, 2**63 + i, 0])))
        elif x_kind == "epochs":
            row[0] = draw(st.sampled_from([str(i // 3 + 1), f"{i // 3 + 1}.0", "", f"{i / 3:.2f}"]))
        elif x_kind == "floats":
            row[0] = draw(st.sampled_from([str(float(i)), f"{i}e0", "nan", "-1", "", f"{i}"]))
        if not plain and draw(st.integers(0, 10)) == 0:
            row = row[:draw(st.integers(0, ncol))]  # ragged
        rows.append(delim.join(row))
    text = delim.join(header) + "\n" + "\n".join(rows)
    if draw(st.booleans()):
        text += "\n"
    if draw(st.integers(0, 10)) == 0:
        text += draw(st.sampled_from(["1,2", "  ", "\n", "\r\n", "x", "\t"]))
    return text


@SETTINGS
@given(text=csv_text(), bom=st.booleans(), override=st.sampled_from([None, ("step", "loss"), ("epoch", "step")]))
def test_csv_fast_equals_general(tmp_path: Path, text: str, bom: bool,
                                 override: tuple[str, str] | None) -> None:
    p = tmp_path / "log.csv"
    raw = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    both_csv(p, raw.decode("utf-8-sig"), override, data=raw)
    both_csv(p, text, override)


# ----------------------------------------------------------------------------- TensorBoard
def read_tb(path: Path, bulk: bool, monkeypatch: pytest.MonkeyPatch) -> Table | str:
    """tensorboard.read with or without the bulk path: the Table, or the error's message."""
    general = tensorboard._read_file
    with monkeypatch.context() as m:
        if not bulk:
            m.setattr(tensorboard, "_read_file", functools.partial(general, bulk=False))
        try:
            return tensorboard.read(path)
        except UsageError as exc:
            return str(exc)


def both_tb(path: Path, monkeypatch: pytest.MonkeyPatch) -> Table | str:
    fast, general = read_tb(path, True, monkeypatch), read_tb(path, False, monkeypatch)
    if isinstance(general, str) or isinstance(fast, str):
        assert fast == general
    else:
        assert_same(fast, general)
    return fast


TB_FIXTURES = sorted({p.parent for p in FIX.rglob("*tfevents*")} | set(FIX.rglob("*tfevents*")))


@pytest.mark.parametrize("path", TB_FIXTURES, ids=[str(p.relative_to(FIX)) for p in TB_FIXTURES])
def test_tensorboard_fixtures_same_table(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not isinstance(both_tb(path, monkeypatch), str)


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative: two's complement, 10 bytes
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num: int, payload: bytes) -> bytes:
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def record(data: bytes) -> bytes:
    head = struct.pack("<Q", len(data))
    mask = tensorboard._masked_crc
    return head + struct.pack("<I", mask(head)) + data + struct.pack("<I", mask(data))


def add_scalar(step: int, tag: bytes, value: float) -> bytes:
    """SummaryWriter.add_scalar's record (the bulk path's layout for tags under 119 bytes)."""
    summary = field(1, field(1, tag) + b"\x15" + struct.pack("<f", value))
    return record(b"\x09" + struct.pack("<d", 1.7e9) + (b"\x10" + varint(step) if step else b"")
                  + field(5, summary))


def tensor_scalar(step: int, tag: bytes, value: float) -> bytes:
    """TF2's tf.summary.scalar: a one-element float tensor with the scalars plugin's metadata."""
    meta = field(1, field(1, b"scalars"))
    tensor = b"\x08\x01" + field(2, b"") + field(4, struct.pack("<f", value))
    summary = field(1, field(1, tag) + field(9, meta) + field(8, tensor))
    return record(b"\x09" + struct.pack("<d", 1.7e9) + b"\x10" + varint(step) + field(5, summary))


@st.composite
def event_file(draw: st.DrawFn) -> bytes:
    tags = [b"loss", b"lr", b"a/b", b"", b"x" * 118, b"y" * 119, b"\xff\xfe", b"loss2"]
    chunks = [record(b"\x09" + struct.pack("<d", 1.0) + field(3, b"brain.Event:2"))]
    if draw(st.integers(0, 10)) == 0:
        chunks = []
    step = st.one_of(st.integers(0, 300), st.integers(0, 2**62), st.integers(-2**63, -1),
                     st.sampled_from([0, 127, 128, 2**56 - 1, 2**56, 2**63 - 1]))
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["scalar"] * 6 + ["tensor", "multi", "junk", "embedded", "reordered"]))
        s, tag = draw(step), draw(st.sampled_from(tags))
        value = draw(st.floats(width=32))
        if kind == "scalar":
            chunks.append(add_scalar(s, tag, value))
        elif kind == "tensor":
            chunks.append(tensor_scalar(s, tag, value))
        elif kind == "multi":  # two values in one summary: the general decoder's case
            values = field(1, field(1, tag) + b"\x15" + struct.pack("<f", value)) + \
                field(1, field(1, b"lr") + b"\x15" + struct.pack("<f", 0.5))
            chunks.append(record(b"\x09" + struct.pack("<d", 2.0) + b"\x10" + varint(s) + field(5, values)))
        elif kind == "junk":  # an image-like value: no scalar
            chunks.append(record(b"\x10" + varint(s) + field(5, field(1, field(1, tag) + field(4, b"\x00" * 9)))))
        elif kind == "embedded":  # a whole add_scalar record inside another record's payload
            inner = add_scalar(s, tag, value)
            chunks.append(record(b"\x10\x05" + field(5, field(1, field(1, b"img") + field(4, inner)))))
        else:  # step before wall_time: not the bulk layout
            summary = field(1, field(1, tag) + b"\x15" + struct.pack("<f", value))
            chunks.append(record(b"\x10" + varint(s) + b"\x09" + struct.pack("<d", 1.0) + field(5, summary)))
    return b"".join(chunks)


@SETTINGS
@given(data=event_file(), cut=st.integers(0, 200),
       flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=2))
def test_tensorboard_bulk_equals_general(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes,
                                         cut: int, flips: list[tuple[int, int]]) -> None:
    p = tmp_path / "events.out.tfevents.1.host"
    p.write_bytes(data)
    both_tb(p, monkeypatch)
    mutated = bytearray(data)
    for at, byte in flips:
        if mutated:
            mutated[at % len(mutated)] = byte
    p.write_bytes(bytes(mutated[:max(12, len(mutated) - cut)]))
    both_tb(p, monkeypatch)


def test_tensorboard_bulk_path_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """add_scalar records are decoded in bulk: the general decoder sees only the others."""
    steps = [0, 1, 127, 128, 16384, 2**28, 2**55]
    data = record(b"\x09" + struct.pack("<d", 1.0) + field(3, b"brain.Event:2"))
    data += b"".join(add_scalar(s, t, s / 3) for s in steps for t in (b"loss", b"lr"))
    data += tensor_scalar(2**55 + 1, b"loss", 1.5) + add_scalar(2**55 + 2, b"loss", 2.5)
    p = tmp_path / "events.out.tfevents.1.host"
    p.write_bytes(data)
    decoded: list[int] = []  # offsets of the records the general decoder saw
    general = tensorboard._event
    monkeypatch.setattr(tensorboard, "_event", lambda *a: decoded.append(a[3]) or general(*a))
    assert isinstance(read_tb(p, True, monkeypatch), Table)
    tensor_at = data.index(tensor_scalar(2**55 + 1, b"loss", 1.5))
    assert decoded == [0, tensor_at]  # the file_version and the tensor record
    t = both_tb(p, monkeypatch)
    assert isinstance(t, Table)
    assert t.series["loss"].steps == [*steps, 2**55 + 1, 2**55 + 2]
    assert t.series["loss"].values == [struct.unpack("<f", struct.pack("<f", s / 3))[0] for s in steps] + [1.5, 2.5]
    assert list(t.series) == ["loss", "lr"]
