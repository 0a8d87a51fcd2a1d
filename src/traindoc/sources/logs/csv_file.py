"""CSV metrics logs: a hand-written ``training_log.csv`` (one row per epoch or step) and
Lightning's ``CSVLogger`` ``metrics.csv`` (sparse rows: train and val metrics on different
rows, empty cells where a row has no value, ``step`` and ``epoch`` columns).

Columns are converted whole (``map(float, column)`` runs at C speed); only a column with empty
or text cells takes the cell-by-cell path.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from traindoc.errors import UsageError
from traindoc.sources.logs._table import Series, Table, to_float
from traindoc.sources.logs.mapping import EPOCH_NAMES, STEP_NAMES

_DELIMITERS = (",", "\t", ";", "|")


def read(path: Path, text: str, x_override: tuple[str, str] | None = None) -> Table:
    """``text`` is the file's content; ``x_override`` is ("step"|"epoch", column) from --map."""
    lines = text.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        raise UsageError(f"{path} is empty; pass the metrics file your training wrote")
    delim = max(_DELIMITERS, key=lines[0].count)
    if lines[0].count(delim) == 0:
        raise UsageError(
            f"{path}: the first line has no comma, tab or semicolon, so this is not a CSV header "
            f"({lines[0][:60]!r}); pass a CSV with a header row, a TensorBoard event file, a "
            "trainer_state.json or a .jsonl log")
    try:
        rows = list(csv.reader(io.StringIO(text.lstrip("\r\n")), delimiter=delim))
    except csv.Error as exc:
        raise UsageError(f"{path}: not a readable CSV ({exc}); check the file") from None
    rows = [r for r in rows if r]
    header = [h.strip() for h in rows[0]]
    raw_header = list(header)
    if len(set(header)) != len(header) or any(not h for h in header):
        header = _unique(header)
    ncol = len(header)
    table = Table(format="csv", files=[str(path)])
    body = rows[1:]
    # A header repeated further down (a resumed run that appended with a new header).
    repeats = [i for i, r in enumerate(body) if [c.strip() for c in r] == raw_header]
    if repeats:
        table.notes.append(f"{path.name}: the header row repeats {len(repeats)} time(s) (appended runs); "
                           "those rows are skipped")
        skip = set(repeats)
        body = [r for i, r in enumerate(body) if i not in skip]
    if body and len(body[-1]) < ncol and not text.endswith(("\n", "\r")):
        table.notes.append(f"{path.name}: the last line is cut short (the run was stopped while writing?); "
                           "it is skipped")
        body.pop()
    if not body:
        raise UsageError(f"{path} has a header but no rows of values; wait for the run to log, or pass "
                         "another file")
    bad = next((i for i, r in enumerate(body) if len(r) > ncol), None)
    if bad is not None:
        raise UsageError(
            f"{path}: line {bad + 2} has {len(body[bad])} fields but the header has {ncol}; the file "
            f"is corrupt or its delimiter is not {delim!r}; fix or cut that line")
    if any(len(r) != ncol for r in body):
        body = [r + [""] * (ncol - len(r)) for r in body]
    columns = list(zip(*body))

    lower = [h.lower() for h in header]
    if {"epoch", "step"} <= set(lower) and any("" in c for c in columns):
        table.format = "lightning-csv"
    xi, kind = _x_column(header, lower, x_override, path)
    n = len(body)
    if xi is None:
        xs = list(range(n))
        table.notes.append(f"{path.name}: no step or epoch column; rows are numbered 0..{n - 1}")
    else:
        table.x, table.x_column = kind, header[xi]
        raw = [to_float(c) for c in columns[xi]]
        if any(v is None or not math.isfinite(v) for v in raw):
            missing = sum(v is None or not math.isfinite(v) for v in raw)
            if missing == n:
                raise UsageError(f"{path}: the {header[xi]} column holds no numbers; pass "
                                 "--map step=COLUMN to name the step column")
            table.notes.append(f"{path.name}: {missing} row(s) without a {header[xi]} value are skipped")
        ints = [v is not None and math.isfinite(v) and v == int(v) for v in raw]
        if not all(ok for ok, v in zip(ints, raw) if v is not None and math.isfinite(v)):
            table.notes.append(f"{path.name}: {header[xi]} has fractional values; rows are numbered instead")
            xs = list(range(n))
            table.x, table.x_column = "step", None
        else:
            xs = [int(v) if v is not None and math.isfinite(v) else -1 for v in raw]
            if kind == "epoch" and min(x for x in xs if x >= 0) == 1:
                xs = [x - 1 if x >= 0 else -1 for x in xs]
                table.notes.append(f"{path.name}: {header[xi]} starts at 1; shown 0-based (epoch 1 is step 0)")
    keep_all = all(x >= 0 for x in xs)
    for j, name in enumerate(header):
        if j == xi:
            continue
        col = columns[j]
        try:
            vals = list(map(float, col))
        except ValueError:
            vals = None
        if vals is not None and keep_all:
            table.series[name] = Series(xs, vals)
            continue
        cells = [to_float(c) for c in col] if vals is None else vals
        steps = [x for x, v in zip(xs, cells) if v is not None and x >= 0]
        values = [v for x, v in zip(xs, cells) if v is not None and x >= 0]
        text_cells = sum(1 for c, v in zip(col, cells) if v is None and c.strip())
        if not values:
            if text_cells:
                table.non_numeric.append(name)
            continue
        if text_cells:
            first = next(c for c, v in zip(col, cells) if v is None and c.strip())
            table.notes.append(f"{name}: {text_cells} non-numeric cell(s) skipped (e.g. {first[:20]!r})")
        table.series[name] = Series(steps, values)
    return table


def _x_column(header: list[str], lower: list[str], override: tuple[str, str] | None,
              path: Path) -> tuple[int | None, str]:
    if override is not None:
        kind, col = override
        if col not in header:
            raise UsageError(f"--map {kind}={col}: {path} has no column {col!r} (columns: "
                             f"{', '.join(header[:12])})")
        return header.index(col), kind
    for kind, names in (("step", STEP_NAMES), ("epoch", EPOCH_NAMES)):
        for name in names:
            if name in lower:
                return lower.index(name), kind
    return None, "step"


def _unique(header: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for i, h in enumerate(header):
        h = h or f"column_{i + 1}"
        if h in seen:
            seen[h] += 1
            h = f"{h}_{seen[h]}"
        else:
            seen[h] = 1
        out.append(h)
    return out
