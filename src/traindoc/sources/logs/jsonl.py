"""JSONL metrics logs: one JSON object per line (``{"step": 10, "loss": 2.3, "lr": 3e-4}``;
nested objects are flattened with ``/``), and traindoc's own ``--record`` event streams, told
apart by the ``kind`` field of their first line and replayed as they are.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from traindoc import record
from traindoc.errors import UsageError, too_deep
from traindoc.events import EVENT_TYPES
from traindoc.sources.logs._table import Series, Table, number
from traindoc.sources.logs.mapping import EPOCH_NAMES, STEP_NAMES


def read(path: Path, text: str, x_override: tuple[str, str] | None = None) -> Table:
    lines = text.splitlines()
    rows: list[dict[str, object]] = []
    table = Table(format="jsonl", files=[str(path)])
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines) - 1 and not text.endswith("\n"):
                table.notes.append(f"{path.name}: the last line is cut short (the run was stopped while "
                                   "writing?); it is skipped")
                break
            raise UsageError(f"{path}:{i + 1}: not JSON ({exc.msg}); a JSONL log has one JSON object "
                             "per line: fix or remove that line") from None
        except RecursionError:
            raise too_deep(f"{path}:{i + 1}", "a JSONL log has one flat JSON object per line: fix or remove "
                           "that line") from None
        if not isinstance(obj, dict):
            raise UsageError(f"{path}:{i + 1}: a JSON {type(obj).__name__}, not an object; a JSONL log "
                             "has one JSON object per line")
        if not rows and str(obj.get("kind")) in EVENT_TYPES:
            return _stream(path)
        try:
            rows.append(_flatten(obj))
        except RecursionError:  # nested objects a little less deep than json's own limit
            raise too_deep(f"{path}:{i + 1}", "a JSONL log has one flat JSON object per line: fix or "
                           "remove that line") from None
    if not rows:
        raise UsageError(f"{path} holds no JSON objects; pass a log with one object per line")

    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    lower = {k.lower(): k for k in reversed(list(keys))}
    xkey, kind = None, "step"
    if x_override is not None:
        kind, xkey = x_override
        if xkey not in keys:
            raise UsageError(f"--map {kind}={xkey}: {path} has no key {xkey!r}")
    else:
        for k, names in (("step", STEP_NAMES), ("epoch", EPOCH_NAMES)):
            found = next((lower[n] for n in names if n in lower), None)
            if found is not None:
                xkey, kind = found, k
                break
    xs: list[int] = []  # -1: skip the line (a negative step)
    last = 0
    carried = negative = 0
    for i, r in enumerate(rows):
        if xkey is None:
            xs.append(i)
            continue
        v = r.get(xkey)
        if isinstance(v, str):
            v = number(v)
        if isinstance(v, int) and not isinstance(v, bool):
            last = v
        elif isinstance(v, float) and math.isfinite(v) and v == int(v):
            last = int(v)
        elif v is not None:
            raise UsageError(f"{path}: {xkey} = {v!r} on object {i + 1} is not a whole number; pass "
                             "--map step=KEY to name the step key")
        else:
            carried += 1
        negative += last < 0
        xs.append(last if last >= 0 else -1)
    if xkey is None:
        table.notes.append(f"{path.name}: no step or epoch key; lines are numbered 0..{len(rows) - 1}")
    else:
        table.x, table.x_column = kind, xkey
        if carried:
            table.notes.append(f"{path.name}: {carried} line(s) without {xkey} take the previous line's")
        if negative:
            table.notes.append(f"{path.name}: {negative} line(s) with a negative {xkey} are skipped")
        valid = [x for x in xs if x >= 0]
        if kind == "epoch" and valid and min(valid) == 1:
            xs = [x - 1 if x >= 0 else -1 for x in xs]
            table.notes.append(f"{path.name}: {xkey} starts at 1; shown 0-based (epoch 1 is step 0)")
    text_keys: set[str] = set()
    for x, r in zip(xs, rows):
        if x < 0:
            continue
        for k, v in r.items():
            if k == xkey:
                continue
            f = number(v)
            if f is None:
                if v is not None:
                    text_keys.add(k)
                continue
            s = table.series.get(k)
            if s is None:
                s = table.series[k] = Series()
            s.steps.append(x)
            s.values.append(f)
    table.non_numeric = [k for k in keys if k in text_keys and k not in table.series]
    return table


def _stream(path: Path) -> Table:
    try:
        events = list(record.read(path))
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{exc}; the traindoc stream is corrupt") from None
    except RecursionError:
        raise too_deep(path, "the traindoc stream is corrupt") from None
    return Table(format="traindoc-stream", files=[str(path)], events=events)


def _flatten(obj: dict[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out
