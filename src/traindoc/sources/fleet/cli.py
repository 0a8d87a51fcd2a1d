"""``traindoc logs PATH``: one run's logs, or a fleet of runs diagnosed one by one.

A fleet is a folder holding several runs (``runs/``, ``lightning_logs/``, a sweep's output
folders, W&B ``wandb/``), an MLflow tracking URI (``mlruns/``, ``sqlite:///mlflow.db``,
``http://host:5000``) or W&B offline run folders. Everything else goes to the single-run path
(``sources.logs.cli``) unchanged. Imports no torch, and no tracker client until one is read.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TextIO

from traindoc import config
from traindoc.errors import UsageError
from traindoc.findings import severity_rank
from traindoc.report import output
from traindoc.report.safe import terminal
from traindoc.sources.fleet.discover import RunRef, runs_in
from traindoc.sources.logs import cli as single

if TYPE_CHECKING:
    from traindoc.engine import Report

URI_SCHEMES = ("http://", "https://", "sqlite://", "postgresql://", "postgresql+", "mysql://", "mysql+",
               "mssql://", "mssql+", "file:", "databricks")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    single.add_arguments(parser)
    fleet = parser.add_argument_group(
        "a fleet of runs", "PATH may be a folder of runs (one sub-folder or file per run) or an MLflow "
        "tracking URI (mlruns/, sqlite:///mlflow.db, http://host:5000): each run gets its own "
        "diagnosis, then one line per run, worst first")
    fleet.add_argument("--experiment", metavar="NAME", action="append",
                       help="MLflow: the runs of this experiment (repeatable; default: every experiment)")
    fleet.add_argument("--run-id", metavar="ID", action="append", dest="run_ids",
                       help="MLflow: only these runs (repeatable)")
    fleet.add_argument("--filter", metavar="EXPR",
                       help="MLflow: a search_runs filter string, e.g. \"params.lr = '0.1'\"")
    fleet.add_argument("--jobs", type=int, metavar="N",
                       help="processes diagnosing runs at once (default: the CPUs, at most 8; "
                            "4 for a tracking server)")


def run(args: argparse.Namespace) -> int:
    refs, title = _fleet(args)
    if refs is None:
        return single.run(args)
    return run_fleet(args, refs, title)


def _fleet(args: argparse.Namespace) -> tuple[list[RunRef] | None, str]:
    """The runs when PATH names a fleet, else (None, '') for the single-run path."""
    tracker = bool(args.experiment or args.run_ids or args.filter)
    if len(args.paths) != 1:
        if tracker:
            raise UsageError("--experiment, --run-id and --filter read one MLflow tracking URI; pass one PATH")
        return None, ""
    target = args.paths[0]
    if _is_mlflow(target):
        from traindoc.sources.fleet import mlflow_runs

        refs = mlflow_runs.runs(target, experiments=args.experiment or (), run_ids=args.run_ids or (),
                                filter_string=args.filter or "")
        return refs, target
    if tracker:
        raise UsageError(f"--experiment, --run-id and --filter select MLflow runs; {target} is no "
                         "MLflow tracking URI (mlruns/, sqlite:///mlflow.db, http://host:5000)")
    refs = runs_in(Path(target))
    if len(refs) >= 2 or any(r.kind != "logs" for r in refs):
        return refs, target
    return None, ""  # one run (or none: the single-run path says what is missing)


def _is_mlflow(target: str) -> bool:
    if target.startswith(URI_SCHEMES):
        return True
    path = Path(target)
    if path.is_file() and path.suffix == ".db":
        return True
    # A file store: mlruns/<experiment id>/meta.yaml beside mlruns/<experiment id>/<run id>/.
    try:
        return path.is_dir() and any((d / "meta.yaml").is_file() and d.name.isdigit() for d in path.iterdir())
    except OSError:
        return False


def run_fleet(args: argparse.Namespace, refs: list[RunRef], title: str) -> int:
    from traindoc.report import fleet as view
    from traindoc.report import text
    from traindoc.sources import fleet as fleet_source
    from traindoc.sources.logs import mapping

    single.check_options(args)
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    if not refs:
        raise UsageError(f"{title}: no run found; pass a folder of runs or a run's log")
    settings = config.load()
    select, ignore = output.detector_choice(args, settings)
    options = fleet_source.Options(settings=settings, select=select, ignore=ignore,
                                   num_classes=args.num_classes, max_norm=args.max_norm,
                                   overrides=mapping.parse_overrides(args.map), json=bool(args.json))
    kinds = Counter(r.source for r in refs)
    sys.stderr.write(view.plain(f"traindoc logs: {title}: {len(refs)} runs ("
                                + ", ".join(f"{n} {k}" for k, n in kinds.items()) + ")") + "\n")
    fleet = fleet_source.diagnose(refs, options, source=title, jobs=args.jobs)
    try:
        rows = [view.Row(name=r.name, id=r.ref.id, source=r.ref.source, steps=r.steps, x=r.x,
                         error=r.error, findings=tuple(r.findings)) for r in fleet.runs]

        def report_of(i: int) -> Report | None:
            return fleet.report(fleet.runs[i])

        # Each run with findings gets the report `traindoc logs` gives for one run (every run
        # with --verbose); the fleet view follows, so it is what stays on the screen.
        for i in sorted(range(len(rows)), key=lambda i: rows[i].rank()):
            if rows[i].findings or (args.verbose and rows[i].error is None):
                report = report_of(i)
                if report is not None:
                    text.render(report, verbose=args.verbose)
                    sys.stderr.write("\n")
        for line in view.lines(rows, title):
            sys.stderr.write(line + "\n")
        if args.json:
            _write(args.json, "the JSON report", lambda out: view.write_json(
                rows, lambda i: fleet.report_json(fleet.runs[i]), out, title))
        if getattr(args, "html", None):
            _write(args.html, "the HTML report",
                   lambda out: out.writelines(view.html(rows, report_of, title)))
    finally:
        fleet.close()
    if all(r.error is not None for r in rows):
        raise UsageError(f"{title}: none of its {len(rows)} runs could be read (reasons above)")
    fail_on = args.fail_on or settings.fail_on
    if fail_on and any(severity_rank(f.severity) <= severity_rank(fail_on) for r in rows for f in r.findings):
        return output.EXIT_FAIL_ON
    return 0


def _write(path: str, what: str, write: Callable[[TextIO], None]) -> None:
    """Write a report run by run to ``path`` ('-': stdout), through a temporary name so a
    failed write leaves no half file; a failure is one line on stderr, the rest goes on."""
    if path == "-":
        try:
            write(sys.stdout)
        except Exception as exc:
            sys.stderr.write(terminal(f"traindoc: could not write {what}: {type(exc).__name__}: {exc}") + "\n")
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.traindoc-tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            write(out)
        os.replace(tmp, target)
    except Exception as exc:  # an output failing must not lose the others or the exit code
        sys.stderr.write(terminal(f"traindoc: could not write {what} {path}: {type(exc).__name__}: {exc}") + "\n")
    finally:
        tmp.unlink(missing_ok=True)
