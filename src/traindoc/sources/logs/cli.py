"""``traindoc logs PATH...``: the command line of the logs face. Imports no torch."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, TextIO

from traindoc import config
from traindoc.errors import UsageError
from traindoc.events import Clip, Event, Series, plain
from traindoc.report import output

if TYPE_CHECKING:
    from traindoc.engine import Report
    from traindoc.sources.logs import Log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a metrics log of one run: CSV (also Lightning's metrics.csv), a "
                             "TensorBoard event file or folder, a trainer_state.json, a JSONL log or "
                             "a traindoc --record stream; several PATHs are merged as one run")
    parser.add_argument("--map", action="append", metavar="SIGNAL=COLUMN",
                        help="map columns to signals yourself, e.g. --map loss=Train_Loss,lr=LR "
                             "(also loss_term.NAME=, metric.NAME=, step=, epoch=, ignore=)")
    parser.add_argument("--num-classes", type=int, metavar="C",
                        help="number of classes, so val-at-chance knows chance accuracy (1/C)")
    parser.add_argument("--max-norm", type=float, metavar="X",
                        help="the max_norm given to clip_grad_norm_, so clipping-every-step can "
                             "judge the logged (pre-clip) gradient norm")
    output.add_report_options(parser)


def run(args: argparse.Namespace) -> int:
    _one_blas_thread()
    from traindoc.sources import logs
    from traindoc.sources.logs import mapping

    check_options(args)
    settings = config.load()
    select, ignore = output.detector_choice(args, settings)
    overrides = mapping.parse_overrides(args.map)
    log = logs.load([Path(p) for p in args.paths], overrides)
    log.argv = tuple(sys.argv[1:])
    _check_max_norm(log, args.max_norm)
    gc.freeze()  # the log's millions of values live to the end: keep the collector off them
    describe(log, sys.stderr)
    report = diagnose(log, settings, select=select, ignore=ignore, num_classes=args.num_classes,
                      max_norm=args.max_norm)
    return output.emit(report, args, settings)


def check_options(args: argparse.Namespace) -> None:
    if args.num_classes is not None and args.num_classes < 2:
        raise UsageError(f"--num-classes must be >= 2, got {args.num_classes}")
    if args.max_norm is not None and not args.max_norm > 0:
        raise UsageError(f"--max-norm must be > 0, got {args.max_norm}")


def _check_max_norm(log: Log, max_norm: float | None) -> None:
    if max_norm is not None and log.table.events is None and "grad_norm" not in log.signals():
        raise UsageError("--max-norm needs a gradient norm column in the log; map one with "
                         "--map grad_norm=COLUMN")


def diagnose(log: Log, settings: config.Settings, *, select: tuple[str, ...] | None,
             ignore: tuple[str, ...], num_classes: int | None = None,
             max_norm: float | None = None) -> Report:
    """One run's report from its read log: what ``traindoc logs`` shows for a run (the fleet
    calls it once per run)."""
    from traindoc.analyze import analyze

    _check_max_norm(log, max_norm)
    detectors = {k: dict(v) for k, v in settings.detectors.items()}
    if num_classes is not None:
        detectors.setdefault("val-at-chance", {})["classes"] = num_classes
    if log.map.units:  # the unit told from the whole log, not from the first values seen
        detectors.setdefault("val-at-chance", {}).setdefault("percent", "percent" in log.map.units.values())
    extra = ("clip",) if max_norm is not None else ()
    events: Iterator[Event] = log.events(extra_signals=extra)
    if max_norm is not None:
        events = _with_clips(events, max_norm)
    settings = dataclasses.replace(settings, detectors=detectors)
    report = analyze(events, select=select, ignore=ignore, settings=settings)
    t = log.table
    if t.events is None:
        report.run["x"] = t.x
        report.run["logs"] = {
            "format": t.format, "files": list(t.files), "x_column": t.x_column,
            "mapping": {sig: col for col, sig in log.map.signal_of.items()},
            "unmapped": list(log.map.unmapped), "ignored": list(log.map.ignored),
            "explicit": list(log.map.explicit), "units": dict(log.map.units),
            "notes": list(t.notes) + list(log.map.notes),
        }
    return report


def _one_blas_thread() -> None:
    """numpy's BLAS (OpenBLAS, MKL) starts a worker thread per core for a matrix product. The
    CSV reader's products are thin (a million rows by 8 digits by 3 columns), and on a busy
    machine (a training job on every core) the workers make one 150x slower: 60 ms instead of
    0.4, several seconds over a log. Nothing in this command is large enough to gain from them,
    so it keeps one thread unless the user chose otherwise. Effective only before numpy is
    imported, as here (the CLI imports it when a log is read); the command starts no process."""
    if "numpy" in sys.modules:
        return
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def describe(log: Log, out: TextIO) -> None:
    """The lines printed before the report: what was read, how it was mapped, what was not."""
    from traindoc.sources.logs._table import one_line

    for line in _describe(log):
        out.write(one_line(line) + "\n")


def _describe(log: Log) -> Iterator[str]:
    t, m = log.table, log.map
    files = ", ".join(Path(f).name for f in t.files[:3]) + (f" and {len(t.files) - 3} more" if len(t.files) > 3 else "")
    if t.events is not None:
        yield f"traindoc logs: {files} (traindoc stream, {len(t.events)} events)"
        return
    points = sum(len(s) for s in t.series.values())
    axis = f"x = {t.x_column}" if t.x_column else "x = row number"
    yield f"traindoc logs: {files} ({t.format}, {points} points, {axis}, {t.x}s)"
    def shown(col: str, text: str) -> str:
        tags = [t for t, on in (("--map", col in m.explicit), (m.units.get(col, ""), col in m.units)) if on]
        return f"{text} ({', '.join(tags)})" if tags else text

    canon = [shown(col, f"{sig}={col}") for col, sig in m.signal_of.items() if "." not in sig]
    terms = [shown(col, col) for col, sig in m.signal_of.items() if sig.startswith("loss_term.")]
    metrics = [shown(col, col) for col, sig in m.signal_of.items() if sig.startswith("metric.")]
    loads = [shown(col, col) for col, sig in m.signal_of.items() if sig.startswith("expert_load.")]
    parts = []
    if canon:
        parts.append(", ".join(canon))
    if terms:
        parts.append("loss terms: " + ", ".join(terms))
    if metrics:
        parts.append("metrics: " + ", ".join(metrics))
    if loads:
        parts.append("expert loads: " + ", ".join(loads))
    how = "by name, case and separators ignored" + (", and by --map" if m.explicit else "")
    yield f"mapped ({how}): {'; '.join(parts)}"
    if m.units:
        yield "units: " + "; ".join(f"{col} in {u} ({m.unit_why[col]})" for col, u in m.units.items())
    if m.unmapped:
        yield f"unmapped columns: {', '.join(m.unmapped)} (use --map signal=column)"
    for note in list(t.notes) + list(m.notes):
        yield f"note: {note}"


def _with_clips(events: Iterator[Event], max_norm: float) -> Iterator[Event]:
    """A logged pre-clip gradient norm with a known max_norm is what a clip_grad_norm_ call
    reports: pass it on as a Clip event too."""
    where = f"--max-norm {max_norm:g}"
    for ev in events:
        yield ev
        if isinstance(ev, Series) and ev.name == "grad_norm":
            for step, norm in zip(plain(ev.steps), plain(ev.values)):  # Python numbers for JSON
                yield Clip(step=step, norm=norm, max_norm=max_norm, where=where)
