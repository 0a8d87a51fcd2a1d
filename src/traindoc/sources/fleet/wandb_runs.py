"""W&B runs written in offline mode (``wandb/offline-run-*/run-<id>.wandb``), read without a
network and without a W&B account (``pip install 'traindoc[wandb]'``).

A ``.wandb`` file is W&B's transaction log: a 7-byte file header (``:W&B``, the magic 0xBEE1,
version 0), then the records of a LevelDB-style log: 32 KiB blocks of chunks, each with a
7-byte header (CRC-32 of its type and data, uint16 length, type: 1 a whole record, 2/3/4 its
first, middle and last pieces); a block's tail shorter than a header is zero padding. Each
record is a ``wandb.proto.wandb_internal_pb2.Record`` (the wandb package's own protobuf
definitions, imported when a run is read): ``run`` gives the run's name, ``history`` one
``run.log`` call (items ``{nested_key, value_json}``, the step in ``_step``). Since wandb 0.19
the package itself has no Python reader of these files (its Go core reads them), so the
framing is read here.

Checks: the header's ident and magic say "a W&B run file"; a chunk whose CRC does not match,
or a record cut short at the end (a run killed while writing), ends the read with a note; what
came before it is diagnosed.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from traindoc.errors import UsageError
from traindoc.sources.fleet.discover import RunRef

if TYPE_CHECKING:
    from traindoc.sources.logs import Log

_FILE_HEADER = struct.Struct("<4sHB")
_CHUNK_HEADER = struct.Struct("<IHB")
_IDENT, _MAGIC, _VERSION = b":W&B", 0xBEE1, 0
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_HIDDEN = ("_step", "_runtime", "_timestamp")  # W&B's own bookkeeping, no training signal


def records(data: bytes, notes: list[str]) -> Iterator[bytes]:
    """The records of a ``.wandb`` file's bytes; a problem ends the walk with a note."""
    if len(data) < _FILE_HEADER.size:
        raise UsageError("too short to be a W&B run file")
    ident, magic, version = _FILE_HEADER.unpack_from(data, 0)
    if ident != _IDENT or magic != _MAGIC:
        raise UsageError("not a W&B run file (its header is not ':W&B')")
    if version != _VERSION:
        raise UsageError(f"W&B run file version {version}; this traindoc reads version {_VERSION}")
    pos, pieces = _FILE_HEADER.size, bytearray()
    while pos < len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _CHUNK_HEADER.size:  # the block's zero padding
            pos += left
            continue
        if pos + _CHUNK_HEADER.size > len(data):
            notes.append(f"the file ends inside a chunk header at byte {pos} (a run killed while writing?)")
            return
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        if crc == 0 and length == 0 and kind == 0:  # preallocated, never written
            return
        start = pos + _CHUNK_HEADER.size
        chunk = data[start:start + length]
        if len(chunk) < length:
            notes.append(f"the last record is cut short at byte {pos} (a run killed while writing?)")
            return
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            notes.append(f"a chunk at byte {pos} fails its checksum; the records after it are not read")
            return
        pos = start + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pieces = bytearray(chunk)
        elif kind in (_MIDDLE, _LAST):
            pieces += chunk
            if kind == _LAST:
                yield bytes(pieces)
        else:
            notes.append(f"unknown chunk type {kind} at byte {pos}; the records after it are not read")
            return


def run_file(folder: Path) -> Path:
    files = sorted(folder.glob("run-*.wandb"))
    if not files:
        raise UsageError(f"{folder}: no run-*.wandb file in this W&B run folder")
    return files[0]


def load(ref: RunRef, overrides: dict[str, str]) -> tuple[Log, str]:
    """One offline run's history as a log of the logs face, and the run's name as W&B shows it
    (``name (id)``; the folder's name when the file has none)."""
    try:
        from wandb.proto import wandb_internal_pb2 as pb
    except ImportError:
        raise UsageError("reading W&B runs needs the wandb package: pip install 'traindoc[wandb]'") from None

    path = run_file(Path(ref.paths[0]))
    notes: list[str] = []
    columns: dict[str, tuple[list[int], list[float]]] = {}
    name = ""
    record: Any = getattr(pb, "Record")()  # generated code: no stubs
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        for raw in records(data, notes):
            record.Clear()
            try:
                record.ParseFromString(raw)
            except Exception:  # protobuf's DecodeError (its module has no stubs)
                raise UsageError("a record does not decode as W&B's protobuf; pass a run file "
                                 "written by wandb") from None
            which = record.WhichOneof("record_type")
            if which == "run" and record.run.display_name:
                name = record.run.display_name
            elif which == "history":
                _history(record.history, columns)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None
    label = f"wandb run {name} ({ref.id})" if name else f"wandb run {ref.id}"
    if not columns:
        raise UsageError(f"{path}: no metric logged with run.log" + (f" ({notes[0]})" if notes else ""))
    from traindoc.sources import logs

    log = logs.from_columns(columns, format="wandb", overrides=overrides, label=label)
    log.table.notes.extend(notes)
    return log, f"{name} ({ref.id})" if name else ref.name


def _history(history: Any, columns: dict[str, tuple[list[int], list[float]]]) -> None:
    """One ``run.log`` call: its numbers at its step (``_step``, else the record's step)."""
    values: dict[str, float] = {}
    step = int(history.step.num)
    for item in history.item:
        nested = getattr(item, "nested_key", ())  # wandb < 0.17 writes only ``key``
        key = ".".join(nested) if len(nested) else item.key
        try:
            value = json.loads(item.value_json)
        except ValueError:
            continue
        if key == "_step" and isinstance(value, (int, float)) and math.isfinite(value):
            step = int(value)
        elif key not in _HIDDEN and isinstance(value, (int, float)) and not isinstance(value, bool):
            values[key] = float(value)
    for key, value in values.items():
        steps, vals = columns.setdefault(key, ([], []))
        steps.append(step)
        vals.append(value)
