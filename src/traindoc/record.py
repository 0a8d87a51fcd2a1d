"""Event streams as JSONL: what ``--record`` writes and ``traindoc analyze`` replays."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import IO, Iterator

from traindoc.events import Event, from_dict, to_dict


def _encode(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(value: object) -> object:
    if isinstance(value, dict):
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _record(value: object) -> dict[str, object]:
    """A decoded JSON line, which must be an object (a dict) to be an event."""
    decoded = _decode(value)
    if not isinstance(decoded, dict):
        raise ValueError(f"expected a JSON object, got {type(decoded).__name__}")
    return decoded


def dump_line(event: Event) -> str:
    """One event as one JSON line; NaN/Inf are kept exactly as ``{"__float__": "nan"}``."""
    return json.dumps(_encode(to_dict(event)), separators=(",", ":"))


def rank_path(path: str | Path, rank: int, world_size: int) -> Path:
    """Where rank ``rank`` records: ``DIR/rank<N>.jsonl`` when ``path`` is a folder (one that
    exists, ends with ``/``, or has no ``.jsonl`` suffix in a multi-rank run), else ``path``
    itself for a single process and ``<stem>.rank<N>.jsonl`` beside it for several ranks, so
    that no two ranks write the same file."""
    p = Path(path)
    if re.search(r"rank\d+\.jsonl$", p.name):  # already one rank's file (a spawned child's)
        return p
    if p.is_dir() or str(path).endswith(("/", os.sep)) or (world_size > 1 and p.suffix != ".jsonl"):
        return p / f"rank{rank}.jsonl"
    if world_size > 1:
        return p.with_name(f"{p.stem}.rank{rank}{p.suffix}")
    return p


def rank_of(path: str | Path, events: list[Event]) -> int:
    """The rank a recorded stream belongs to: from its file name (``rank<N>``), else from its
    events (the first that names a rank)."""
    match = re.search(r"rank(\d+)\.jsonl$", str(path))
    if match:
        return int(match.group(1))
    for event in events:
        rank = getattr(event, "rank", None)
        if isinstance(rank, int):
            return rank
    return 0


class Recorder:
    """Appends events to a JSONL file as they come (so a crashed run still leaves its stream).
    Under a launcher that sets ``RANK``/``WORLD_SIZE`` (torchrun) each rank writes its own
    file (``rank_path``)."""

    def __init__(self, path: str | Path, rank: int | None = None, world_size: int | None = None) -> None:
        rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
        self.path = rank_path(path, rank, world_size)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = open(self.path, "w", encoding="utf-8")

        self._discarded = False

    def __call__(self, event: Event) -> None:
        if not self._discarded:
            self._file.write(dump_line(event) + "\n")

    def close(self) -> None:
        self._file.close()

    def discard(self) -> None:
        """Remove the file and record nothing more (a parent process whose spawned children
        record the training)."""
        self._discarded = True
        self._file.close()
        self.path.unlink(missing_ok=True)


def read(path: str | Path) -> Iterator[Event]:
    """Events from a JSONL stream. ValueError names the line of a bad record."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield from_dict(_record(json.loads(line)))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a traindoc event: {exc}") from None
