"""Event streams as JSONL: what ``--record`` writes and ``traindoc analyze`` replays."""

from __future__ import annotations

import json
import math
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


class Recorder:
    """Appends events to a JSONL file as they come (so a crashed run still leaves its stream)."""

    def __init__(self, path: str | Path) -> None:
        self._file: IO[str] = open(path, "w", encoding="utf-8")

    def __call__(self, event: Event) -> None:
        self._file.write(dump_line(event) + "\n")

    def close(self) -> None:
        self._file.close()


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
