"""``traindoc logs PATH...``: diagnose a finished run from its metrics logs.

Readers (one module per format) turn a file into a ``Table`` of named series; ``mapping``
turns names into signals (``Train_Loss`` -> ``loss``); ``_table.series`` turns the mapped
table into ``RunStart``/``Series``/``RunEnd`` events (a ``Series`` is a column of the
``Scalar`` events the live face produces). All PATHs are logs of one run (e.g. the event files
of a run restarted twice) and are merged.

    log = load([Path("training_log.csv")], overrides={"loss": "Train_Loss"})
    report = analyze(log.events())
"""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from traindoc.errors import UsageError, regular_file
from traindoc.events import Event, RunEnd, RunStart
from traindoc.sources.logs import _table, mapping
from traindoc.sources.logs._table import Table
from traindoc.progress import Progress

@dataclass
class Log:
    """A run's logs, read and mapped."""

    table: Table
    map: mapping.Mapping
    label: str = ""  # the PATHs as given, for the report's title
    argv: tuple[str, ...] = ()

    def signals(self) -> list[str]:
        return list(dict.fromkeys(self.map.signal_of.values()))

    def events(self, extra_signals: tuple[str, ...] = ()) -> Iterator[Event]:
        """RunStart, the Scalars in step order, RunEnd (a --record stream: its own events).

        The RunStart declares the signals the log carries (plus ``extra_signals`` a caller
        derives from them), so the engine skips detectors that could never apply."""
        t = self.table
        if t.events is not None:
            yield from t.events
            return
        yield RunStart(source="logs", script=self.label or ", ".join(t.files), argv=self.argv,
                       signals=tuple(self.signals()) + extra_signals)
        columns = _table.series(t, self.map.signal_of)
        yield from columns
        yield RunEnd(steps=max((int(c.steps[-1]) + 1 for c in columns if len(c)), default=0))


def load(paths: list[Path], overrides: dict[str, str] | None = None) -> Log:
    """Read and merge ``paths`` (files or folders of one run) and map their columns.

    A bad file raises UsageError with a one-line message (names from the file that hold
    control characters are escaped)."""
    try:
        return _load(paths, overrides or {})
    except UsageError as exc:
        raise UsageError(_table.one_line(str(exc))) from None


_BIG = 50 << 20  # bytes


def _size(path: Path) -> int:
    try:
        if path.is_dir():
            return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        return path.stat().st_size
    except OSError:
        return 0  # read() says what is wrong with it


def _load(paths: list[Path], overrides: dict[str, str]) -> Log:
    x_override = next(((k, overrides[k]) for k in ("step", "epoch") if k in overrides), None)
    big = sum(_size(p) for p in paths) > _BIG  # a large log says what it is reading at once
    with _gc_paused(), Progress("traindoc logs", len(paths), after=0.0 if big else 0.5) as progress:
        tables = []
        for i, p in enumerate(paths):
            progress.update(i, f"reading {p}")
            tables.append(read(p, x_override))
    table = tables[0] if len(tables) == 1 else merge(tables)
    if table.events is not None:
        if not table.events:
            raise UsageError(f"{table.files[0]} holds no events; record a run with "
                             "`traindoc run --record RUN.jsonl train.py`")
        return Log(table, mapping.Mapping(), label=" ".join(map(str, paths)))
    return _mapped(table, overrides, " ".join(map(str, paths)))


def from_columns(columns: dict[str, tuple[list[int], list[float]]], *, format: str, label: str,
                 x: str = "step", overrides: dict[str, str] | None = None) -> Log:
    """A run whose metrics came from a tracker's API (MLflow, W&B), not a file: ``{name:
    (steps, values)}``, mapped exactly as a log's columns are. Raises UsageError as ``load``."""
    table = Table(format=format, files=[label], x=x, x_column=x)
    for name, (steps, values) in columns.items():
        table.series[name] = _table.Series(list(steps), list(values))
    try:
        return _mapped(table, overrides or {}, label)
    except UsageError as exc:
        raise UsageError(_table.one_line(str(exc))) from None


def _mapped(table: Table, overrides: dict[str, str], label: str) -> Log:
    table.finish()
    if not table.series and not table.non_numeric:
        raise UsageError(f"{', '.join(table.files[:3])}: no value with a usable step "
                         f"({'; '.join(table.notes) or 'nothing logged'}); pass a log of a run that logged")
    columns = list(table.series)
    wanted = {col for key, col in overrides.items() if key not in ("step", "epoch")}
    missing = sorted(wanted - set(columns) - set(table.non_numeric) - ({table.x_column} - {None}))
    if missing:
        import difflib

        hints = [f"{m!r} (did you mean {difflib.get_close_matches(m, columns, n=1)[0]!r}?)"
                 if difflib.get_close_matches(m, columns, n=1) else repr(m) for m in missing]
        raise UsageError(f"--map names column(s) the log does not have: {', '.join(hints)}; its "
                         f"numeric columns are {', '.join(columns[:20])}")
    bad = sorted(wanted & set(table.non_numeric))
    if bad:
        raise UsageError(f"--map: column(s) {', '.join(bad)} hold text, not numbers")
    m = mapping.resolve(columns, overrides)
    m.unmapped.extend(c for c in table.non_numeric if c not in m.unmapped)
    mapping.infer_units(m, {col: peak for col, sig in m.signal_of.items()
                            if sig in mapping.ACCURACY_SIGNALS
                            and (peak := table.series[col].finite_max()) is not None})
    if not m.signal_of:
        shown = ", ".join(columns[:12] + table.non_numeric[:4]) or "none"
        raise UsageError(
            f"{', '.join(table.files[:3])}: no column could be mapped to a training signal (columns: "
            f"{shown}); name them with --map, e.g. --map loss={columns[0] if columns else 'COLUMN'}")
    return Log(table, m, label=label)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Reading makes millions of small objects that live to the end and hold no cycles; the
    cyclic collector would rescan them again and again (about half the read time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read(path: Path, x_override: tuple[str, str] | None = None) -> Table:
    """One file or folder, in whichever format it is."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder; pass a metrics log (CSV, TensorBoard "
                         "event file or folder, trainer_state.json, JSONL)")
    try:
        if path.is_dir():
            return _read_dir(path, x_override)
        return _read_file(path, x_override)
    except PermissionError:
        raise UsageError(f"{path}: permission denied; check the file's permissions") from None
    except OSError as exc:  # a dangling link, a device, an I/O error
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc}); pass a regular file") from None


def _read_file(path: Path, x_override: tuple[str, str] | None) -> Table:
    # The readers import numpy: only when a log is read (the CLI's parser imports this package).
    from traindoc.sources.logs import csv_file, jsonl, tensorboard, trainer_state

    regular_file(path, "pass a metrics log (CSV, TensorBoard event file, trainer_state.json, JSONL)")
    name = path.name.lower()
    if "tfevents" in name:
        return tensorboard.read(path)
    raw = path.read_bytes()
    if not raw or raw.isspace():  # not raw.strip(): that copies the file
        raise UsageError(f"{path} is empty; pass the metrics file your training wrote")
    if tensorboard.is_event_file(raw[:12]):
        return tensorboard.read(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: a binary file that is not a TensorBoard event file; pass a CSV, "
                         "JSONL, trainer_state.json or events.out.tfevents.* file") from None
    if "\x00" in text[:4096]:
        raise UsageError(f"{path}: a binary file, not a text log; pass a CSV, JSONL, "
                         "trainer_state.json or events.out.tfevents.* file")
    suffix = path.suffix.lower()
    head = text.lstrip()[:1]
    if suffix == ".json" or (head in ("{", "[") and suffix not in (".jsonl", ".ndjson", ".csv", ".tsv")
                             and _whole_json(text)):
        return trainer_state.load(path, text)
    if suffix in (".jsonl", ".ndjson") or head == "{":
        return jsonl.read(path, text, x_override)
    return csv_file.read(path, text, x_override, data=raw)


def _whole_json(text: str) -> bool:
    import json

    try:
        json.loads(text)
    except ValueError:
        return False
    except RecursionError:
        return True  # whole JSON as far as it goes: its reader says it is too deep
    return True


def _read_dir(path: Path, x_override: tuple[str, str] | None) -> Table:
    states = sorted(path.glob("trainer_state.json")) or sorted(path.glob("*/trainer_state.json"))
    csvs = sorted(path.glob("metrics.csv")) or sorted(path.glob("*/metrics.csv"))
    tb = any("tfevents" in p.name for p in path.rglob("*"))
    kinds = [k for k, found in (("trainer_state.json", states), ("metrics.csv", csvs),
                                ("TensorBoard event files", tb)) if found]
    if not kinds:
        raise UsageError(f"{path}: no log found in this folder (looked for trainer_state.json, "
                         "metrics.csv, events.out.tfevents.*); pass the log file itself")
    if len(kinds) > 1:
        raise UsageError(f"{path} holds logs in several formats ({', '.join(kinds)}); pass one of "
                         "them (a file, or the folder of one kind)")
    if states:
        # checkpoint-500/, checkpoint-1000/: each holds the whole history so far; take the latest.
        def step_of(p: Path) -> int:
            m = re.search(r"(\d+)$", p.parent.name)
            return int(m.group(1)) if m else -1

        chosen = max(states, key=step_of)
        table = _read_file(chosen, x_override)
        if len(states) > 1:
            table.notes.append(f"{len(states)} checkpoints hold a trainer_state.json; read the latest, "
                               f"{chosen.relative_to(path)}")
        return table
    if csvs:
        if len(csvs) > 1:
            names = ", ".join(str(c.relative_to(path)) for c in csvs[:6])
            raise UsageError(f"{path} holds {len(csvs)} runs ({names}); pass one run's metrics.csv")
        return _read_file(csvs[0], x_override)
    from traindoc.sources.logs import tensorboard

    return tensorboard.read(path)


def merge(tables: list[Table]) -> Table:
    """Several logs of one run: their series are concatenated by name (in the order given)."""
    if any(t.events is not None for t in tables):
        raise UsageError("a traindoc --record stream cannot be merged with other logs; pass it alone")
    xs = {t.x for t in tables}
    if len(xs) > 1:
        raise UsageError("these logs count different things (steps in some, epochs in others); "
                         "pass them one at a time")
    out = Table(format="+".join(dict.fromkeys(t.format for t in tables)), files=[],
                x=tables[0].x, x_column=tables[0].x_column)
    for t in tables:
        out.files.extend(t.files)
        out.notes.extend(t.notes)
        out.non_numeric.extend(c for c in t.non_numeric if c not in out.non_numeric)
        for name, s in t.series.items():
            old = out.series.get(name)
            if old is None:
                out.series[name] = _table.Series(list(s.steps), list(s.values))
            else:
                old.steps.extend(s.steps)
                old.values.extend(s.values)
    return out
