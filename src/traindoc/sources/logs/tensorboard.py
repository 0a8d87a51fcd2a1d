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
exact layout ``add_scalar`` writes are matched a few MB at a time by one regex (``_Fast``, about
1 us a record in all); every other record goes through the general field walker.

Checks: the first record's length CRC and the file_version record say "this is an event file";
a record cut short at the end of the file (a run killed while writing) is dropped with a note
(its length CRC tells a cut from corruption); a record that does not decode is an error naming
its byte offset. The data CRC is not checked (a pure-Python crc32c would cost more than the
whole decode).
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Callable

from traindoc.errors import UsageError
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
        for folder, series in tags.items():
            if not series:
                continue
            # add_scalars("Loss", {"train": ...}) writes tag "Loss" into folder "Loss_train".
            if folder != path and all(folder.name.startswith(t.replace("/", "_") + "_") for t in series):
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


def _read_file(path: Path, buf: bytes, out: dict[str, Series], table: Table) -> None:
    n = len(buf)
    if n == 0:
        table.notes.append(f"{path.name}: empty event file, skipped")
        return
    if not is_event_file(buf[:12]):
        raise UsageError(f"{path}: not a TensorBoard event file (bad record header); pass an "
                         "events.out.tfevents.* file or its folder")
    plugin: dict[str, str] = {}
    # Per tag: add_scalar records found by the scanner (raw bytes, decoded at the end), and
    # records decoded one by one, with the index among the raw ones where each belongs.
    raw: dict[bytes, tuple[list[bytes], list[bytes]]] = {}
    lists: dict[bytes, list[tuple[int, int, float]]] = {}
    fast: _Fast | None = None
    pos = 0
    try:
        while pos < n:
            if fast is not None:
                pos = fast.consume(buf, pos, raw)
                if pos >= n:
                    break
            # One record the slow way: another layout, a new tag, or the first records.
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
            new_tag = _event(buf, start, end, lists, raw, plugin, pos == 0)
            pos = end + 4
            if new_tag is not None and new_tag not in raw:
                raw[new_tag] = ([], [])
                fast = _Fast(list(raw), fast.chunk if fast else _Fast.MAX)
    except (Corrupt, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: corrupt event file near byte {pos} ({exc}); TensorBoard cannot read "
                         "it either; pass the other files of the run") from None
    for tag in dict.fromkeys([*lists, *raw]):
        steps_b, values_b = raw.get(tag, ([], []))
        steps = [b[0] if len(b) == 1 else (b[0] & 127 | b[1] << 7) if len(b) == 2 else
                 (b[0] & 127 | (b[1] & 127) << 7 | b[2] << 14) if len(b) == 3 else _varint(b, 0)[0]
                 for b in steps_b]
        values = list(struct.unpack(f"<{len(values_b)}f", b"".join(values_b)))
        # Points decoded the slow way go back to their place in file order.
        for at, step, value in reversed(lists.get(tag, [])):
            steps.insert(at, step)
            values.insert(at, value)
        if not steps:
            continue
        name = tag.decode("utf-8", "replace")
        old = out.get(name)
        if old is None:
            out[name] = Series(steps, values)
        else:  # the same tag in a later file of the run (a restart): appended, then re-ordered
            old.steps.extend(steps)
            old.values.extend(values)


class _Fast:
    """The add_scalar fast path: ``findall`` over a chunk of the file (no Python per record),
    taken only when its matches tile the chunk exactly (the first starts where we are, the last
    ends where their summed lengths say, so no other record sits between them). The chunk
    adapts: it doubles while chunks tile, and shrinks to twice the last stretch of back-to-back
    records when other records (histograms, images) are interleaved; below 64 KB it matches
    record by record, so the scan stays linear whatever the mix."""

    MIN, FINDALL, MAX = 1 << 10, 1 << 16, 1 << 22  # below FINDALL bytes: record by record

    def __init__(self, tags: list[bytes], chunk: int = MAX) -> None:
        alt = b"|".join(re.escape(t) for t in sorted(tags, key=len, reverse=True))
        # Whole records (length 8, crc 4, data, crc 4) of Event{wall_time, step,
        # summary{value{tag, simple_value}}}: 37 bytes plus the step's varint and the tag.
        self.pattern = re.compile(rb".{12}\x09.{8}\x10([\x80-\xff]{0,9}[\x00-\x7f])\x2a.\x0a.\x0a.("
                                  + alt + rb")\x15(.{4}).{4}", re.S)
        self.chunk = chunk

    def consume(self, buf: bytes, pos: int, raw: dict[bytes, tuple[list[bytes], list[bytes]]]) -> int:
        """Take the add_scalar records that follow ``pos``; return where they stop."""
        n, pat = len(buf), self.pattern
        while pos < n and pat.match(buf, pos) is not None:
            if self.chunk >= self.FINDALL:
                found = pat.findall(buf, pos, min(n, pos + self.chunk))
                steps, tags, values = zip(*found)
                size = 37 * len(found) + sum(map(len, steps)) + sum(map(len, tags))
                last = pat.match(buf, pos + size - 37 - len(steps[-1]) - len(tags[-1]))
            if self.chunk < self.FINDALL or last is None or last.end() != pos + size or last.groups() != found[-1]:
                start = pos
                m = pat.match(buf, pos)
                while m is not None:  # record by record up to the first other record
                    step, tag, value = m.groups()
                    raw[tag][0].append(step)
                    raw[tag][1].append(value)
                    pos = m.end()
                    m = pat.match(buf, pos)
                self.chunk = max(self.MIN, 2 * (pos - start))
                return pos
            if len(set(tags)) == 1:
                raw[tags[0]][0].extend(steps)
                raw[tags[0]][1].extend(values)
            else:
                for step, tag, value in found:
                    raw[tag][0].append(step)
                    raw[tag][1].append(value)
            pos += size
            self.chunk = min(self.MAX, 2 * self.chunk)
        return pos


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


def _fields(buf: bytes, pos: int, end: int):  # type: ignore[no-untyped-def]
    """(field number, wire type, value): an int for varints, (start, end) for bytes fields,
    the raw position for fixed32/fixed64."""
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


def _event(buf: bytes, start: int, end: int, lists: dict[bytes, list[tuple[int, int, float]]],
           raw: dict[bytes, tuple[list[bytes], list[bytes]]], plugin: dict[str, str], first: bool) -> bytes | None:
    """Decode one Event record into ``lists``; return its tag when the record is a lone
    simple_value (add_scalar's layout), so that later records of that tag take the fast path."""
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
    if first and not version and summary is None:
        raise Corrupt("the first record is neither a file_version nor a summary")
    if summary is None:
        return None
    values = [v for n, w, v in _fields(buf, *summary) if n == 1 and w == 2]
    last: bytes | None = None
    for vs, ve in values:
        tag, value = _value(buf, vs, ve, plugin)
        if tag is None or value is None:
            continue
        at = len(raw[tag][0]) if tag in raw else 0
        lists.setdefault(tag, []).append((at, step, value))
        last = tag
    return last if len(values) == 1 else None


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
            vals.extend(_repeated(buf, wire, val, _F32.unpack_from, 4))
        elif num == 6:  # double_val
            vals.extend(_repeated(buf, wire, val, _F64.unpack_from, 8))
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


def _repeated(buf: bytes, wire: int, val, unpack: Callable, size: int) -> list[float]:  # type: ignore[no-untyped-def, type-arg]
    if wire == 2:
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
