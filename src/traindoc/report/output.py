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
from traindoc.report import safe

EXIT_FAIL_ON = 3


# The options that name a file traindoc writes (argparse dests), checked before any work starts.
OUTPUT_OPTIONS = {"json": "--json", "html": "--html", "sarif": "--sarif", "record": "--record",
                  "output": "--output"}
_SUFFIX = {"--json": ".json", "--html": ".html", "--sarif": ".sarif", "--record": ".jsonl"}
# Options that accept '-' for stdout.
_STDOUT_OK = {"json", "html", "output"}
EXIT_CODES = """exit codes:
  0  clean: the script (if any) succeeded and no finding reached --fail-on
  N  the script's own exit code when it failed (an exception gives 1; Ctrl-C, SIGTERM,
     SIGHUP end it by that signal after the report: 130, 143, 129), whatever traindoc found
  2  bad usage or input (one line on stderr, no traceback)
  3  the script succeeded and a finding is at or above --fail-on"""


def add_report_options(parser: argparse.ArgumentParser, *, detectors: bool = True,
                       gate_help: str | None = None) -> None:
    """``gate_help``: a face that exits 3 by default (preflight, a gate before the long job)
    says so there, and ``--fail-on never`` turns its gate off."""
    parser.add_argument("--json", metavar="PATH", help="write the JSON report to PATH ('-' for stdout)")
    parser.add_argument("--html", metavar="PATH", help="write a self-contained HTML report (plots) to PATH")
    parser.add_argument("--fail-on", choices=("error", "warning", "info") + (("never",) if gate_help else ()),
                        help=gate_help or "exit 3 if a finding of this severity or worse exists (for CI)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="list the detectors that were not applicable, and why")
    if detectors:
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
    """Fail before the run, not after it, when a report cannot be written there: a folder, a
    missing or unwritable folder, a file that cannot be replaced."""
    if not path or path == "-":
        return
    target = Path(path)
    if target.is_dir() or path.endswith(("/", os.sep)):
        example = target / ("report" + _SUFFIX.get(option, ""))
        raise UsageError(f"{option} {path}: is a folder; give a file name, e.g. {option} {example}")
    parent = target.resolve().parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise UsageError(f"{option} {path}: {parent} {what}; create the folder first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: cannot write in {parent} (permission denied); choose another folder")
    if target.exists() and not os.access(target, os.W_OK):
        raise UsageError(f"{option} {path}: the file exists and is read-only; remove it or choose another name")


def check_outputs(args: argparse.Namespace) -> None:
    """Every output path a face was given, checked before it starts (``cli.main``)."""
    for dest, option in OUTPUT_OPTIONS.items():
        path = getattr(args, dest, None)
        if isinstance(path, str):
            if path == "-" and dest not in _STDOUT_OK:
                raise UsageError(f"{option} -: needs a file name (it cannot write to stdout)")
            check_output_path(path, option)


def emit(report: Report, args: argparse.Namespace, settings: Settings | None = None) -> int:
    """Render the terminal report, write the files asked for, return 0 or EXIT_FAIL_ON.

    Each output is written on its own: one that fails (a full disk, a renderer bug) is one line
    on stderr and never stops the others or changes the exit code. Files are written to a
    temporary name and renamed, so a failed write never leaves half a report."""
    from traindoc.report import json as json_report
    from traindoc.report import text

    _safely("the terminal report", lambda: text.render(report, verbose=getattr(args, "verbose", False)))
    if args.json:
        if args.json == "-":
            _safely("the JSON report", lambda: sys.stdout.write(json_report.dumps(report)))
        else:
            _safely(f"the JSON report {args.json}", lambda: _write(args.json, json_report.dumps(report)))
    if getattr(args, "html", None):
        from traindoc.report import html

        if args.html == "-":
            _safely("the HTML report", lambda: sys.stdout.write(html.render(report)))
        else:
            _safely(f"the HTML report {args.html}", lambda: _write(args.html, html.render(report)))
    fail_on = args.fail_on or (settings.fail_on if settings else None)
    if fail_on and report.worst() <= severity_rank(fail_on):
        return EXIT_FAIL_ON
    return 0


def _write(path: str, data: str) -> None:
    target = Path(path)
    tmp = target.with_name(f".{target.name}.traindoc-tmp")
    try:
        tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)  # gone after the rename; a failed write leaves nothing behind


def _safely(what: str, write: Callable[[], object]) -> None:
    try:
        write()
    except Exception as exc:  # an output failing must not lose the others or the exit code
        sys.stderr.write(safe.terminal(f"traindoc: could not write {what}: {type(exc).__name__}: {exc}") + "\n")
