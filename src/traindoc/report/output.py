"""Report options shared by every face that produces a Report (run, analyze, logs, ckpt)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable

from traindoc import catalog
from traindoc.config import Settings
from traindoc.engine import Report
from traindoc.errors import UsageError
from traindoc.findings import severity_rank

EXIT_FAIL_ON = 3


def add_report_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", help="write the JSON report to PATH ('-' for stdout)")
    parser.add_argument("--html", metavar="PATH", help="write an HTML report to PATH")
    parser.add_argument("--fail-on", choices=("error", "warning", "info"),
                        help="exit 3 if a finding of this severity or worse exists (for CI)")
    parser.add_argument("--ignore", metavar="ID,ID", default="", help="mute these failure ids")
    parser.add_argument("--select", metavar="ID,ID", default="", help="run only these detectors")


def id_list(text: str, option: str) -> tuple[str, ...]:
    ids = tuple(i.strip() for i in text.split(",") if i.strip())
    for i in ids:
        try:
            catalog.get(i)
        except KeyError as exc:
            raise UsageError(f"{option}: {exc.args[0]}") from None
    return ids


def detector_choice(args: argparse.Namespace, settings: Settings) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """(select, ignore) from the command line and pyproject settings."""
    select = id_list(args.select, "--select") or settings.select
    ignore = id_list(args.ignore, "--ignore") + tuple(settings.ignore)
    return select, ignore


def check_output_path(path: str | None, option: str) -> None:
    """Fail before the run, not after it, when a report cannot be written."""
    if not path or path == "-":
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: folder {parent} does not exist; create it first")


def emit(report: Report, args: argparse.Namespace, settings: Settings | None = None) -> int:
    """Render the terminal report, write the files asked for, return 0 or EXIT_FAIL_ON.

    Each output is written on its own: one that fails (a full disk, a renderer bug) is one line
    on stderr and never stops the others or changes the exit code. Files are written to a
    temporary name and renamed, so a failed write never leaves half a report."""
    from traindoc.report import json as json_report
    from traindoc.report import text

    _safely("the terminal report", lambda: text.render(report))
    if args.json:
        if args.json == "-":
            _safely("the JSON report", lambda: sys.stdout.write(json_report.dumps(report)))
        else:
            _safely(f"the JSON report {args.json}", lambda: _write(args.json, json_report.dumps(report)))
    if getattr(args, "html", None):
        from traindoc.report import html

        _safely(f"the HTML report {args.html}", lambda: _write(args.html, html.render(report)))
    fail_on = args.fail_on or (settings.fail_on if settings else None)
    if fail_on and report.worst() <= severity_rank(fail_on):
        return EXIT_FAIL_ON
    return 0


def _write(path: str, data: str) -> None:
    target = Path(path)
    tmp = target.with_name(f".{target.name}.traindoc-tmp")
    tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, target)


def _safely(what: str, write: Callable[[], object]) -> None:
    try:
        write()
    except Exception as exc:  # an output failing must not lose the others or the exit code
        sys.stderr.write(f"traindoc: could not write {what}: {type(exc).__name__}: {exc}\n")
