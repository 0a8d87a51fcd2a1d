"""``traindoc logs runs/``: a fleet of runs (a sweep, a tracker's experiment), one diagnosis each.

Runs are found by ``discover`` (a folder), ``mlflow_runs`` (a tracking URI) or ``wandb_runs``
(offline run folders). Each is diagnosed on its own by the logs face's single-run path
(``logs.load`` or ``logs.from_columns``, then ``logs.cli.diagnose``), in worker processes:
runs are independent, and a worker holds one run at a time. The parent keeps each run's
findings and a short profile of its loss and gradient norm (``siblings`` compares those across
the fleet); the full reports wait in a temporary file until they are rendered.

    refs = discover.runs_in(Path("runs"))
    fleet = diagnose(refs, Options(settings=config.load()))
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
import sys
import tempfile
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Iterator, Sequence

from traindoc import config
from traindoc.engine import Report
from traindoc.errors import UsageError
from traindoc.findings import Finding, severity_rank
from traindoc.progress import Progress
from traindoc.sources.fleet.discover import RunRef

if TYPE_CHECKING:
    from traindoc.sources.logs import Log

# The signals compared across siblings, and how many points of each a profile keeps.
PROFILED = ("loss", "grad_norm")
PROFILE_POINTS = 64
# Runs at most in flight at once over a tracking server (each fetches its histories).
SERVER_JOBS = 4


@dataclass(frozen=True)
class Options:
    """What every run is diagnosed with (the logs face's options; picklable)."""

    settings: config.Settings = field(default_factory=config.Settings)
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    num_classes: int | None = None
    max_norm: float | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    json: bool = False  # each worker writes its run's JSON report too (--json): in parallel


@dataclass
class Run:
    """One run's outcome as the parent keeps it: findings, not curves."""

    ref: RunRef
    name: str = ""  # as the fleet view shows it: the path under the folder, the tracker's name
    error: str | None = None  # why the run could not be read; None when it was diagnosed
    steps: int = 0
    x: str = "step"
    findings: list[Finding] = field(default_factory=list)
    profile: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    report: bytes = b""  # the pickled Report, moved to the spool by the parent
    json: bytes = b""  # its JSON report when Options.json, moved to the spool too
    spooled: tuple[int, int] = (0, 0)
    spooled_json: tuple[int, int] = (0, 0)
    amended: bool = False  # the siblings' evidence changed its findings after the worker

    def worst(self) -> int:
        return min((severity_rank(f.severity) for f in self.findings), default=3)



class Fleet:
    """Every run's outcome, in the order found; ``report(run)`` reads one full report back."""

    def __init__(self, source: str, runs: list[Run], spool: IO[bytes]) -> None:
        self.source, self.runs, self._spool = source, runs, spool

    def report(self, run: Run) -> Report | None:
        if run.error is None:
            # Our own temporary file, written by this process from the workers' results: no
            # user file is ever unpickled.
            report: Report = pickle.loads(self._read(run.spooled))
            report.findings = list(run.findings)  # with the siblings' evidence
            return report
        return None

    def report_json(self, run: Run) -> str | None:
        """The run's JSON report as text (the worker's, unless the siblings changed it)."""
        if run.error is not None:
            return None
        if run.spooled_json[1] and not run.amended:
            return self._read(run.spooled_json).decode("utf-8")
        report = self.report(run)
        return None if report is None else _json(report)

    def _read(self, where: tuple[int, int]) -> bytes:
        self._spool.seek(where[0])
        return self._spool.read(where[1])

    def close(self) -> None:
        self._spool.close()


def diagnose(refs: Sequence[RunRef], options: Options, *, source: str = "", jobs: int | None = None,
             label: str = "traindoc logs") -> Fleet:
    """Diagnose every run of ``refs`` (in worker processes when there are several) and compare
    each with its siblings. A run that cannot be read gets its reason and the rest go on."""
    from traindoc.sources.fleet import siblings

    spool = tempfile.TemporaryFile(prefix="traindoc-fleet-")
    runs: list[Run] = []
    with Progress(label, len(refs)) as progress:
        for i, run in enumerate(_results(refs, options, _jobs(refs, jobs))):
            if run.error is None:
                spool.seek(0, os.SEEK_END)
                run.spooled = (spool.tell(), len(run.report))
                run.spooled_json = (run.spooled[0] + len(run.report), len(run.json))
                spool.write(run.report)
                spool.write(run.json)
                run.report = run.json = b""
            runs.append(run)
            progress.update(i + 1, run.name)
    if "sibling-outlier" not in options.ignore and (not options.select or "sibling-outlier" in options.select):
        siblings.compare(runs)
    return Fleet(source, runs, spool)


def diagnose_one(ref: RunRef, options: Options) -> Run:
    """One run's diagnosis; never raises for a run that cannot be read (its ``error`` says why)."""
    from traindoc.sources.logs.cli import diagnose as diagnose_log

    try:
        log, name = _load(ref, options.overrides)
        log.argv = tuple(sys.argv[1:])
        report = diagnose_log(log, options.settings, select=options.select, ignore=options.ignore,
                              num_classes=options.num_classes, max_norm=options.max_norm)
    except UsageError as exc:
        return Run(ref, ref.name, error=str(exc))
    except Exception as exc:  # one broken run must not stop the other 999
        return Run(ref, ref.name, error=f"internal error while reading it: {type(exc).__name__}: {exc}")
    report.run["fleet"] = {"name": name, "id": ref.id, "source": ref.source}
    steps = report.run.get("steps")
    return Run(ref, name=name, steps=steps if isinstance(steps, int) else 0, x=str(report.run.get("x", "step")),
               findings=list(report.findings), profile=_profile(report),
               report=pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL),
               json=_json(report).encode("utf-8") if options.json else b"")


def _json(report: Report) -> str:
    """The single-run JSON report on one line, user strings made safe (report.safe)."""
    import json

    from traindoc.report import json as json_report
    from traindoc.report import safe

    return json.dumps(safe.json_safe(json_report.to_dict(report)))


def _load(ref: RunRef, overrides: dict[str, str]) -> tuple[Log, str]:
    """The run's log and the name the fleet view shows."""
    if ref.kind == "logs":
        from traindoc.sources import logs

        return logs.load([Path(p) for p in ref.paths], overrides), ref.name
    if ref.kind == "mlflow":
        from traindoc.sources.fleet import mlflow_runs

        return mlflow_runs.load(ref, overrides), ref.name
    if ref.kind == "wandb":
        from traindoc.sources.fleet import wandb_runs

        return wandb_runs.load(ref, overrides)
    raise AssertionError(f"unknown run kind {ref.kind!r}")


def _profile(report: Report) -> dict[str, tuple[list[int], list[float]]]:
    """Each profiled signal as at most PROFILE_POINTS (step, mean) pairs: the plot curve (each
    bucket's lowest and highest point) cut into equal runs of points. Enough to compare curves
    across runs (a lone spike moves one point; the comparison wants several in a row), small
    enough to keep for 10,000 runs."""
    import numpy as np

    out: dict[str, tuple[list[int], list[float]]] = {}
    for name in PROFILED:
        curve = report.series.get(name)
        if curve is None or not curve.steps:
            continue
        n = len(curve.steps)
        starts = np.unique(np.linspace(0, n, min(PROFILE_POINTS, n) + 1).astype(np.int64)[:-1])
        sizes = np.diff(np.append(starts, n))
        steps = np.add.reduceat(np.asarray(curve.steps, dtype=np.float64), starts) / sizes
        values = np.add.reduceat(np.asarray(curve.values, dtype=np.float64), starts) / sizes
        out[name] = (steps.astype(np.int64).tolist(), values.tolist())
    return out


def _jobs(refs: Sequence[RunRef], jobs: int | None) -> int:
    if jobs is None:
        try:
            jobs = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            jobs = os.cpu_count() or 1
        jobs = min(jobs, 8)
        if any(r.uri.startswith(("http://", "https://")) for r in refs):
            jobs = min(jobs, SERVER_JOBS)  # be gentle with a shared tracking server
    return max(1, min(jobs, len(refs)))


def _results(refs: Sequence[RunRef], options: Options, jobs: int) -> Iterator[Run]:
    """Each run's outcome in the order of ``refs``."""
    work = functools.partial(diagnose_one, options=options)
    if jobs <= 1 or len(refs) <= 2:
        with _quiet_readers():
            yield from map(work, refs)
    elif any(r.kind == "mlflow" for r in refs):
        # MLflow's runs wait on its server or database more than on the CPU: threads (its
        # client's sessions and connections must not cross a fork).
        from concurrent.futures import ThreadPoolExecutor

        with _quiet_readers(), ThreadPoolExecutor(jobs) as pool:
            yield from _in_order(pool, refs, work, jobs, chunk=1)
    else:
        yield from _processes(refs, work, jobs)


def _processes(refs: Sequence[RunRef], work: Callable[[RunRef], Run], jobs: int) -> Iterator[Run]:
    """Runs from files (logs, W&B run files) in worker processes: fork starts one in
    milliseconds with everything imported (spawn where fork is not offered)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    chunk = max(1, min(8, len(refs) // (jobs * 8)))  # a few runs per message
    done = 0
    while done < len(refs):
        pool = ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_worker_init)
        try:
            for run in _in_order(pool, refs[done:], work, jobs, chunk):
                done += 1
                yield run
        except BrokenProcessPool:
            # A worker died (killed for memory, a crash in a reader's C code): every run in
            # flight failed with it. The first is tried again alone; when it dies again it was
            # the one, and either way the rest go on in a fresh pool.
            pool.shutdown(wait=True, cancel_futures=True)
            yield _alone(refs[done], work, ctx)
            done += 1
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _alone(ref: RunRef, work: Callable[[RunRef], Run], ctx: BaseContext) -> Run:
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    with ProcessPoolExecutor(1, mp_context=ctx, initializer=_worker_init) as pool:
        try:
            return pool.submit(work, ref).result()
        except BrokenProcessPool:
            return Run(ref, ref.name, error="the process reading it died (out of memory, or a crash)")


def _in_order(pool: Executor, refs: Sequence[RunRef], work: Callable[[RunRef], Run], jobs: int,
              chunk: int) -> Iterator[Run]:
    """``work`` over ``refs`` on ``pool``, ``chunk`` runs a task, at most two tasks per worker
    queued: memory holds a few runs' results, not the fleet's."""
    from collections import deque

    pending: deque[Future[list[Run]]] = deque()
    starts = iter(range(0, len(refs), chunk))
    for start in starts:
        pending.append(pool.submit(_each, work, refs[start:start + chunk]))
        if len(pending) >= 2 * jobs:
            break
    while pending:
        yield from pending.popleft().result()
        more = next(starts, None)
        if more is not None:
            pending.append(pool.submit(_each, work, refs[more:more + chunk]))


def _each(work: Callable[[RunRef], Run], refs: Sequence[RunRef]) -> list[Run]:
    return [work(r) for r in refs]


def _worker_init() -> None:
    os.environ["TRAINDOC_NO_PROGRESS"] = "1"  # the parent draws the one progress line
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, "1")


@contextmanager
def _quiet_readers() -> Iterator[None]:
    """In-process diagnosis: the fleet's progress line is the only one."""
    old = os.environ.get("TRAINDOC_NO_PROGRESS")
    os.environ["TRAINDOC_NO_PROGRESS"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRAINDOC_NO_PROGRESS", None)
        else:
            os.environ["TRAINDOC_NO_PROGRESS"] = old
