"""TensorBoard event files, read without TensorFlow and without dropping points.

TensorBoard's own ``EventAccumulator`` keeps at most 10,000 points per tag (reservoir sampling);
a spike between two kept points is lost. This reader keeps every scalar. An event file is a
TFRecord stream (``uint64 length, uint32 masked crc32c(length), data, uint32 masked
crc32c(data)``) of ``Event`` protobufs; this module decodes the few fields that carry scalars:

    Event   { double wall_time = 1; int64 step = 2; Summary summary = 5; ... }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; SummaryMetadata metadata = 9;
              TensorProto tensor = 8; ... }

``SummaryWriter.add_scalar`` (torch, tensorboardX) writes ``simple_value``; TF2 and
``new_style=True`` write a one-element ``tensor`` with the "scalars" plugin. Records in the
exact layout ``add_scalar`` writes are found and decoded in bulk by ``_tb_fast`` (numpy); the
walk over the file takes each run of them where it lands on one, and decodes every other
record with the general field walker below.

Checks: the first record's length CRC and the file_version record say "this is an event file";
a record cut short at the end of the file (a run killed while writing) is dropped with a note
(its length CRC tells a cut from corruption); a record that does not decode is an error naming
its byte offset. The data CRC is not checked (a pure-Python crc32c would cost more than the
whole decode); the bulk path checks each record's length CRC.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from traindoc.errors import UsageError
from traindoc.sources.logs import _tb_fast
from traindoc.sources.logs._bulk import in_order
from traindoc.sources.logs._table import Series, Table

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
# TensorProto dtypes that hold one number; value: (struct format, size).
_DTYPES = {1: ("<f", 4), 2: ("<d", 8), 3: ("<i", 4), 9: ("<q", 8), 19: ("<e", 2), 4: ("<B", 1),
           5: ("<h", 2), 6: ("<b", 1)}


class Corrupt(ValueError):
    pass


def is_event_file(head: bytes) -> bool:
    """Whether ``head`` (the first 12+ bytes of a file) starts a TFRecord stream."""
    if len(head) < 12:
        return False
    (length,) = _U64.unpack_from(head, 0)
    (crc,) = _U32.unpack_from(head, 8)
    return length < 1 << 32 and crc == _masked_crc(head[:8])


def read(path: Path) -> Table:
    """One event file or a log directory (every ``*tfevents*`` file under it, one run)."""
    table = Table(format="tensorboard", files=[], x_column="step")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if "tfevents" in p.name and p.is_file())
        if not files:
            raise UsageError(f"{path}: no TensorBoard event files (events.out.tfevents.*) in this folder")
        by_dir: dict[Path, list[Path]] = {}
        for f in files:
            by_dir.setdefault(f.parent, []).append(f)
        tags: dict[Path, dict[str, Series]] = {}
        for folder, fs in by_dir.items():
            tags[folder] = {}
            for f in fs:
                _read_file(f, f.read_bytes(), tags[folder], table)
                table.files.append(str(f))
        runs, children = [], []
        for folder, found in tags.items():
            if not found:
                continue
            # add_scalars("Loss", {"train": ...}) writes tag "Loss" into folder "Loss_train".
            if folder != path and all(folder.name.startswith(t.replace("/", "_") + "_") for t in found):
                children.append(folder)
            else:
                runs.append(folder)
        if len(runs) > 1:
            names = ", ".join(str(r.relative_to(path)) or "." for r in runs[:6])
            raise UsageError(f"{path} holds {len(runs)} runs ({names}); pass one run's folder")
        for folder in runs:
            table.series.update(tags[folder])
        for folder in children:
            for s in tags[folder].values():
                table.series[folder.name] = s
        if not table.series:
            raise UsageError(f"{path}: the event files hold no scalars (only graphs, images or "
                             "histograms?); log scalars with SummaryWriter.add_scalar")
    else:
        series: dict[str, Series] = {}
        _read_file(path, path.read_bytes(), series, table)
        table.files.append(str(path))
        table.series = series
        if not series:
            raise UsageError(f"{path}: this event file holds no scalars; log them with "
                             "SummaryWriter.add_scalar, or pass the run's folder")
    return table


def _read_file(path: Path, buf: bytes, out: dict[str, Series], table: Table, bulk: bool = True) -> None:
    """Add the scalars of one event file to ``out``. ``bulk=False``: decode every record the
    general way (what the bulk path is tested against)."""
    n = len(buf)
    if n == 0:
        table.notes.append(f"{path.name}: empty event file, skipped")
        return
    if not is_event_file(buf[:12]):
        raise UsageError(f"{path}: not a TensorBoard event file (bad record header); pass an "
                         "events.out.tfevents.* file or its folder")
    plugin: dict[str, str] = {}
    # Per tag, the points decoded one by one: (record offset, index in the record, step, value).
    lists: dict[bytes, list[tuple[int, int, int, float]]] = {}
    found = _tb_fast.scan(buf if bulk else b"", _length_crcs())
    runs: list[tuple[int, int]] = []  # [i, j): bulk records the walk took
    k = 0  # the first bulk record at or after pos
    pos = 0
    try:
        while pos < n:
            at = int(found.starts[k]) if k < len(found) else n
            if pos > at:
                k = int(np.searchsorted(found.starts, pos))
                continue
            if pos == at and pos:  # the first record is checked below, as a file_version
                j = found.run_end(k)
                runs.append((k, j))
                pos, k = int(found.ends[j - 1]), j
                continue
            # One record the general way: another layout, or one the bulk scan could not vouch for.
            if pos + 12 > n:
                _cut(path, pos, table)
                break
            (length_,) = _U64.unpack_from(buf, pos)
            start, end = pos + 12, pos + 12 + length_
            if end + 4 > n:
                if _masked_crc(buf[pos:pos + 8]) != _U32.unpack_from(buf, pos + 8)[0]:
                    raise Corrupt(f"bad record length at byte {pos}")
                _cut(path, pos, table)
                break
            _event(buf, start, end, pos, lists, plugin)
            pos = end + 4
    except (Corrupt, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: corrupt event file near byte {pos} ({exc}); TensorBoard cannot read "
                         "it either; pass the other files of the run") from None
    _collect(found, runs, lists, out)


def _collect(bulk: _tb_fast.Scalars, runs: list[tuple[int, int]],
             lists: dict[bytes, list[tuple[int, int, int, float]]], out: dict[str, Series]) -> None:
    """The points of each tag in file order into ``out``, tags in the order of their first point."""
    taken = np.zeros(len(bulk), bool)
    for i, j in runs:
        taken[i:j] = True
    idx = np.flatnonzero(taken)
    ids = bulk.tag_ids[idx]
    idx = idx[np.argsort(ids.astype(np.uint16) if len(bulk.tags) < 1 << 16 else ids, kind="stable")]
    bounds = np.cumsum(np.bincount(ids, minlength=len(bulk.tags)))
    in_bulk = {bulk.tags[t]: idx[bounds[t] - c:bounds[t]]
               for t, c in enumerate(np.diff(bounds, prepend=0).tolist()) if c}
    first = {tag: (int(bulk.starts[i[0]]), 0) for tag, i in in_bulk.items()}
    for tag, points in lists.items():
        first[tag] = min(first.get(tag, points[0][:2]), points[0][:2])
    for tag in sorted(first, key=first.__getitem__):
        rows = in_bulk.get(tag)
        slow = lists.get(tag, [])
        name = tag.decode("utf-8", "replace")
        if rows is not None and not slow:
            steps_a = bulk.steps[rows].astype(np.int64, copy=False)
            values_a = bulk.values[rows].astype(np.float64, copy=False)
            if name not in out:  # kept as arrays: see Series
                out[name] = Series(arrays=(steps_a, values_a), ordered=in_order(steps_a))
                continue
            steps, values, ordered = steps_a.tolist(), values_a.tolist(), False
        else:
            if rows is None:
                rows = np.empty(0, np.int64)
            # Both kinds in one tag: merged by record offset (a stable sort keeps the values
            # of one record in their order).
            offsets = [p[0] for p in slow] + bulk.starts[rows].tolist()
            order = np.argsort(np.array(offsets, np.int64), kind="stable").tolist()
            all_steps = [p[2] for p in slow] + bulk.steps[rows].tolist()
            all_values = [p[3] for p in slow] + bulk.values[rows].tolist()
            steps, values, ordered = [all_steps[i] for i in order], [all_values[i] for i in order], False
        old = out.get(name)
        if old is None:
            out[name] = Series(steps, values, ordered=ordered)
        else:  # the same tag in a later file of the run (a restart): appended, then re-ordered
            old.steps.extend(steps)
            old.values.extend(values)
            old.ordered = False


@lru_cache(maxsize=1)
def _length_crcs() -> np.ndarray:
    """The masked crc32c of every record length the bulk scan accepts (8 little-endian bytes)."""
    return np.array([_masked_crc(_U64.pack(k)) for k in range(_tb_fast.MAX_LENGTH)], np.uint32)


def _cut(path: Path, pos: int, table: Table) -> None:
    table.notes.append(f"{path.name}: the last record is cut short at byte {pos} (the run was "
                       "stopped while writing?); it is skipped")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Corrupt("varint too long")


def _fields(buf: bytes, pos: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value): an int for varints, (start, end) for bytes fields,
    the raw position for fixed32/fixed64. The value is typed Any: its type follows the wire
    type, which the callers test and mypy cannot follow."""
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, pos = _varint(buf, pos)
            yield num, wire, val
        elif wire == 2:
            ln, pos = _varint(buf, pos)
            if pos + ln > end:
                raise Corrupt("field runs past its message")
            yield num, wire, (pos, pos + ln)
            pos += ln
        elif wire == 1:
            yield num, wire, pos
            pos += 8
        elif wire == 5:
            yield num, wire, pos
            pos += 4
        else:
            raise Corrupt(f"unknown wire type {wire}")
    if pos != end:
        raise Corrupt("message overruns its length")


def _event(buf: bytes, start: int, end: int, pos: int,
           lists: dict[bytes, list[tuple[int, int, int, float]]], plugin: dict[str, str]) -> None:
    """Decode the Event record at byte ``pos`` (data ``start:end``) into ``lists``."""
    step = 0
    summary: tuple[int, int] | None = None
    version = False
    for num, wire, val in _fields(buf, start, end):
        if num == 2 and wire == 0:
            step = val if val < 1 << 63 else val - (1 << 64)
        elif num == 5 and wire == 2:
            summary = val
        elif num == 3 and wire == 2:
            version = buf[val[0]:val[1]].startswith(b"brain.Event")
    if pos == 0 and not version and summary is None:
        raise Corrupt("the first record is neither a file_version nor a summary")
    if summary is None:
        return
    values = [v for n, w, v in _fields(buf, *summary) if n == 1 and w == 2]
    for i, (vs, ve) in enumerate(values):
        tag, value = _value(buf, vs, ve, plugin)
        if tag is not None and value is not None:
            lists.setdefault(tag, []).append((pos, i, step, value))


def _value(buf: bytes, start: int, end: int, plugin: dict[str, str]) -> tuple[bytes | None, float | None]:
    tag: bytes | None = None
    simple: float | None = None
    tensor: tuple[int, int] | None = None
    meta_plugin = ""
    for num, wire, val in _fields(buf, start, end):
        if num == 1 and wire == 2:
            tag = buf[val[0]:val[1]]
        elif num == 2 and wire == 5:
            simple = _F32.unpack_from(buf, val)[0]
        elif num == 8 and wire == 2:
            tensor = val
        elif num == 9 and wire == 2:
            meta_plugin = _plugin_name(buf, *val)
    if tag is None:
        return None, None
    key = tag.decode("utf-8", "replace")
    if meta_plugin:
        plugin[key] = meta_plugin
    if simple is not None:
        return tag, simple
    if tensor is not None and plugin.get(key, "scalars") == "scalars":
        return tag, _tensor_scalar(buf, *tensor)
    return None, None


def _plugin_name(buf: bytes, start: int, end: int) -> str:
    for num, wire, val in _fields(buf, start, end):
        if num == 1 and wire == 2:  # plugin_data
            for n2, w2, v2 in _fields(buf, *val):
                if n2 == 1 and w2 == 2:
                    return buf[v2[0]:v2[1]].decode("utf-8", "replace")
    return ""


def _tensor_scalar(buf: bytes, start: int, end: int) -> float | None:
    """The number in a one-element TensorProto, or None when it is not one."""
    dtype = 0
    content: bytes | None = None
    vals: list[float] = []
    dims = 0
    for num, wire, val in _fields(buf, start, end):
        if num == 1 and wire == 0:
            dtype = val
        elif num == 2 and wire == 2:  # tensor_shape: count dims of size != 1
            for n2, w2, v2 in _fields(buf, *val):
                if n2 == 2 and w2 == 2:
                    size = 1
                    for n3, w3, v3 in _fields(buf, *v2):
                        if n3 == 1 and w3 == 0:
                            size = v3
                    dims += size != 1
        elif num == 4 and wire == 2:
            content = buf[val[0]:val[1]]
        elif num == 5:  # float_val
            vals.extend(_repeated(buf, val, _F32.unpack_from, 4))
        elif num == 6:  # double_val
            vals.extend(_repeated(buf, val, _F64.unpack_from, 8))
        elif num in (7, 10) and wire == 0:  # int_val, int64_val (unpacked)
            vals.append(float(val if val < 1 << 63 else val - (1 << 64)))
        elif num in (7, 10, 13) and wire == 2:  # packed ints (13: half_val as bits)
            p, e = val
            while p < e:
                x, p = _varint(buf, p)
                vals.append(float(x) if num != 13 else struct.unpack("<e", struct.pack("<H", x & 0xFFFF))[0])
    if dims:
        return None
    if content is not None and dtype in _DTYPES:
        fmt, size = _DTYPES[dtype]
        if len(content) == size:
            return float(struct.unpack(fmt, content)[0])
        return None
    return vals[0] if len(vals) == 1 else None


def _repeated(buf: bytes, val: int | tuple[int, int],
              unpack: Callable[[bytes, int], tuple[float, ...]], size: int) -> list[float]:
    if isinstance(val, tuple):  # wire type 2 (packed): the (start, end) of the values
        s, e = val
        return [unpack(buf, p)[0] for p in range(s, e - size + 1, size)]
    return [unpack(buf, val)[0]]


# crc32c (Castagnoli), as TFRecord uses, masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC = _crc_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
