"""CSV metrics logs: a hand-written ``training_log.csv`` (one row per epoch or step) and
Lightning's ``CSVLogger`` ``metrics.csv`` (sparse rows: train and val metrics on different
rows, empty cells where a row has no value, ``step`` and ``epoch`` columns).

Speed: a plain numeric file (no quotes, every row with the header's number of cells, ``\n``
line ends; nearly every metrics log) is parsed in bulk by ``_csv_fast`` (numpy, ~0.5 s for a
million rows of four columns, against ~2 s) and built by ``_build_numbers``; anything else
takes the general path: one ``str.split`` when the rows line up, the ``csv`` module otherwise,
columns converted whole (``map(float, column)``) and cell by cell only where a column has
empty or text cells. Both paths give the same Table (tests/logs/test_reader_speed_paths.py).
"""

from __future__ import annotations

import csv
import math
from itertools import repeat
from pathlib import Path
from typing import Sequence

import numpy as np

from traindoc.errors import UsageError
from traindoc.sources.logs import _csv_fast
from traindoc.sources.logs._bulk import in_order
from traindoc.sources.logs._table import Series, Table, to_float
from traindoc.sources.logs.mapping import EPOCH_NAMES, STEP_NAMES

_DELIMITERS = (",", "\t", ";", "|")
_CUT_NOTE = "{}: the last line is cut short (the run was stopped while writing?); it is skipped"
# Below this many rows the general path is the faster one: the bulk path's fixed cost is
# ~0.4 ms a column (numpy calls), the general path's ~0.7 us a cell; they meet near 1,500 rows.
_BULK_ROWS = 2000


def read(path: Path, text: str, x_override: tuple[str, str] | None = None,
         data: bytes | None = None) -> Table:
    """``text`` is the file's content (``data`` its bytes, when at hand: spares an encode);
    ``x_override`` is ("step"|"epoch", column) from --map."""
    table = _read_fast(path, text, x_override, data, min_rows=_BULK_ROWS)
    return table if table is not None else _read_general(path, text, x_override)


def _read_general(path: Path, text: str, x_override: tuple[str, str] | None) -> Table:
    table = Table(format="csv", files=[str(path)])
    header, columns = _split(path, text, table)
    return _build(path, table, header, columns, x_override)


class _Unsupported(Exception):
    """A case the fast path leaves to the general one (which words the errors)."""


def _read_fast(path: Path, text: str, x_override: tuple[str, str] | None,
               data: bytes | None = None, min_rows: int = 0) -> Table | None:
    """The Table of a plain numeric file, read in bulk; None where the general path must read
    it, or should (fewer than ``min_rows`` rows)."""
    nl = text.find("\n")
    head = text[:max(nl, 0)]
    if not head.strip():
        return None
    delim = max(_DELIMITERS, key=head.count)
    if not head.count(delim):
        return None
    split = _csv_fast.split(text, head, delim, data)
    if split is None:
        return None
    grid, cut = split
    if grid.rows < min_rows:
        return None
    table = Table(format="csv", files=[str(path)])
    if cut:
        table.notes.append(_CUT_NOTE.format(path.name))
    header = _unique([h.strip() for h in head.split(delim)])
    lower = [h.lower() for h in header]
    xi, kind = _x_column(header, lower, x_override, path)
    columns = []
    for j in range(len(header)):
        col = _csv_fast.numbers(grid, j, want_ints=j == xi)
        if col is None:
            return None
        columns.append(col)
    try:
        return _build_numbers(path, table, header, lower, columns, xi, kind)
    except _Unsupported:
        return None


def _split(path: Path, text: str, table: Table) -> tuple[list[str], list[Sequence[str]]]:
    """The header and the columns (cells as text), with notes on what was skipped."""
    lines = text.splitlines()
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start == len(lines):
        raise UsageError(f"{path} is empty; pass the metrics file your training wrote")
    head = lines[start]
    delim = max(_DELIMITERS, key=head.count)
    if head.count(delim) == 0:
        raise UsageError(
            f"{path}: the first line has no comma, tab, semicolon or bar, so it is not a CSV header "
            f"({head[:60]!r}); pass a CSV with a header row, a TensorBoard event file, a "
            "trainer_state.json or a .jsonl log")
    body_lines = [ln for ln in lines[start + 1:] if ln.strip()]
    if body_lines and not text.endswith(("\n", "\r")) and body_lines[-1].count(delim) < head.count(delim):
        table.notes.append(_CUT_NOTE.format(path.name))
        body_lines.pop()
    # A header repeated further down: a resumed run that appended to the file with a new header.
    repeats = [i for i, ln in enumerate(body_lines) if ln == head]
    if repeats:
        table.notes.append(f"{path.name}: the header row repeats {len(repeats)} time(s) (appended runs); "
                           "those rows are skipped")
        body_lines = [ln for ln in body_lines if ln != head]
    if not body_lines:
        raise UsageError(f"{path} has a header but no rows of values; wait for the run to log, or pass "
                         "another file")
    ncol = head.count(delim) + 1
    if '"' not in text and all(map((ncol - 1).__eq__, map(str.count, body_lines, repeat(delim)))):
        flat = delim.join(body_lines).split(delim)
        return _unique([h.strip() for h in head.split(delim)]), [flat[j::ncol] for j in range(ncol)]
    if head.count('"') % 2:  # the quote would run on to the end of the file: one header cell
        raise UsageError(f"{path}: the header row has an unbalanced quote (\"), so its column names "
                         f"cannot be told apart ({head[:60]!r}); fix the header")
    try:
        rows = [r for r in csv.reader([head, *body_lines], delimiter=delim) if r]
    except csv.Error as exc:
        raise UsageError(f"{path}: not a readable CSV ({exc}); check the file") from None
    header = [h.strip() for h in rows[0]]
    ncol = len(header)
    body = rows[1:]
    if not body:  # a quoted cell that never ends took the rows in
        raise UsageError(f"{path}: a quoted cell runs on to the end of the file, so no row of values "
                         "is left; fix the unbalanced quote (\")")
    lengths = list(map(len, body))
    if max(lengths) > ncol:
        bad = next(i for i, n in enumerate(lengths) if n > ncol)
        raise UsageError(
            f"{path}: a row ({len(body[bad])} fields) is longer than the header ({ncol} fields): the file "
            f"is corrupt or its delimiter is not {delim!r}; fix or cut that line ({','.join(body[bad])[:60]!r})")
    if min(lengths) < ncol:
        body = [r + [""] * (ncol - len(r)) for r in body]
    return _unique(header), list(zip(*body))


def _build(path: Path, table: Table, header: list[str], columns: list[Sequence[str]],
           x_override: tuple[str, str] | None) -> Table:
    lower = [h.lower() for h in header]
    n = len(columns[0])
    if {"epoch", "step"} <= set(lower) and any("" in c for c in columns):
        table.format = "lightning-csv"
    xi, kind = _x_column(header, lower, x_override, path)
    if xi is None:
        xs = list(range(n))
        table.notes.append(f"{path.name}: no step or epoch column; rows are numbered 0..{n - 1}")
    else:
        table.x, table.x_column = kind, header[xi]
        found = _x_values(columns[xi], header[xi], path, table)
        if found is None:
            table.notes.append(f"{path.name}: {header[xi]} has fractional values; rows are numbered instead")
            xs = list(range(n))
            table.x, table.x_column = "step", None
        else:
            xs = found
            valid = [x for x in xs if x >= 0]
            if not valid:
                raise UsageError(f"{path}: the {header[xi]} column holds no step >= 0; pass --map "
                                 "step=COLUMN to name the step column")
            if kind == "epoch" and min(valid) == 1:
                xs = [x - 1 if x >= 0 else -1 for x in xs]
                table.notes.append(f"{path.name}: {header[xi]} starts at 1; shown 0-based (epoch 1 is step 0)")
    keep_all = min(xs) >= 0
    for j, name in enumerate(header):
        if j == xi:
            continue
        col = columns[j]
        try:
            vals: list[float] | None = list(map(float, col))
        except ValueError:
            vals = None
        if vals is not None and keep_all:
            table.series[name] = Series(xs, vals)
            continue
        cells = [to_float(c) for c in col] if vals is None else vals
        steps = [x for x, v in zip(xs, cells) if v is not None and x >= 0]
        values = [v for x, v in zip(xs, cells) if v is not None and x >= 0]
        text_cells = [c for c, v in zip(col, cells) if v is None and c.strip()]
        if not values:
            if text_cells:
                table.non_numeric.append(name)
            continue
        if text_cells:
            table.notes.append(f"{name}: {len(text_cells)} non-numeric cell(s) skipped (e.g. {text_cells[0][:20]!r})")
        table.series[name] = Series(steps, values)
    return table


def _x_values(col: Sequence[str], name: str, path: Path, table: Table) -> list[int] | None:
    """The x column as ints, -1 marking rows to skip (no value, or a negative one); None when
    the values are fractional."""
    try:
        xs = list(map(int, col))  # the common case, at C speed
    except ValueError:
        pass
    else:
        negative = sum(1 for x in xs if x < 0) if min(xs) < 0 else 0
        if negative:
            table.notes.append(f"{path.name}: {negative} row(s) with a negative {name} are skipped")
            xs = [max(x, -1) for x in xs]
        return xs
    raw = [to_float(c) for c in col]
    good = [v for v in raw if v is not None and math.isfinite(v)]
    if not good:
        raise UsageError(f"{path}: the {name} column holds no numbers; pass --map step=COLUMN to name "
                         "the step column")
    if any(v != int(v) for v in good):
        return None
    xs = [int(v) if v is not None and math.isfinite(v) and v >= 0 else -1 for v in raw]
    skipped = xs.count(-1)
    if skipped:
        table.notes.append(f"{path.name}: {skipped} row(s) without a {name} value >= 0 are skipped")
    return xs


def _build_numbers(path: Path, table: Table, header: list[str], lower: list[str],
                   columns: list[_csv_fast.Numbers], xi: int | None, kind: str) -> Table:
    """``_build`` on columns parsed in bulk (numpy arrays, not cells): the same series and notes."""
    n = len(columns[0].values)
    if {"epoch", "step"} <= set(lower) and any(c.empty is not None for c in columns):
        table.format = "lightning-csv"
    if xi is None:
        xs = np.arange(n)
        table.notes.append(f"{path.name}: no step or epoch column; rows are numbered 0..{n - 1}")
    else:
        table.x, table.x_column = kind, header[xi]
        found = _x_numbers(columns[xi], header[xi], path, table)
        if found is None:
            table.notes.append(f"{path.name}: {header[xi]} has fractional values; rows are numbered instead")
            xs = np.arange(n)
            table.x, table.x_column = "step", None
        else:
            xs = found
            valid = xs >= 0
            if not valid.any():
                raise _Unsupported
            if kind == "epoch" and xs[valid].min() == 1:
                xs = np.where(valid, xs - 1, -1)
                table.notes.append(f"{path.name}: {header[xi]} starts at 1; shown 0-based (epoch 1 is step 0)")
    keep_all = xs.min() >= 0
    xs = xs.astype(np.int64, copy=False)
    xs_ordered: bool | None = None  # whether the steps every full column shares are in order
    for j, name in enumerate(header):
        if j == xi:
            continue
        col = columns[j]
        if col.empty is None and keep_all:
            if xs_ordered is None:
                xs_ordered = in_order(xs)
            table.series[name] = Series(arrays=(xs, col.values), ordered=xs_ordered)
            continue
        keep = xs >= 0 if col.empty is None else (xs >= 0) & ~col.empty
        if keep.any():
            steps = xs[keep]
            table.series[name] = Series(arrays=(steps, col.values[keep]), ordered=in_order(steps))
    return table


def _x_numbers(col: _csv_fast.Numbers, name: str, path: Path, table: Table) -> np.ndarray | None:
    """``_x_values`` on a column parsed in bulk."""
    if col.ints is not None:
        xs = col.ints
        negative = int((xs < 0).sum())
        if negative:
            table.notes.append(f"{path.name}: {negative} row(s) with a negative {name} are skipped")
            xs = np.maximum(xs, -1)
        return xs
    raw = col.values  # nan where a cell is empty
    finite = np.isfinite(raw)
    if not finite.any():
        raise _Unsupported
    good = raw[finite]
    if (good != np.floor(good)).any():
        return None
    usable = finite & (raw >= 0)
    if (raw[usable] >= 2.0**63).any():
        raise _Unsupported  # beyond int64: Python ints in the general path, dropped by finish()
    xs = np.where(usable, raw, -1).astype(np.int64)
    skipped = len(xs) - int(usable.sum())
    if skipped:
        table.notes.append(f"{path.name}: {skipped} row(s) without a {name} value >= 0 are skipped")
    return xs


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
    """Header names made unique and non-empty (``loss, loss`` -> ``loss, loss_2``)."""
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
