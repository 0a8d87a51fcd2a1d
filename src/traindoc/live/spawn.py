"""Following the training a script starts in processes of its own.

``traindoc run train.py`` where train.py calls ``mp.spawn(worker, nprocs=N)``: the training runs
in the N children, not in the process traindoc started. While a watch is open, torch's
``start_processes`` (which ``mp.spawn`` calls) is wrapped so that each child runs ``worker``
inside a watch of its own, with the parent's options; the child that is rank 0 of the job's
process group (the child with index 0 when the group was never joined) hands its report back
through a file, and the parent's report becomes that one. ``--record`` gives each child its own
stream (``record.rank_path``).

A ``multiprocessing.Process`` (``torch.multiprocessing.Process``) whose target is a function of
the user's own code, or a subclass of it whose ``run()`` is (MorvanZhou's A3C ``Worker``), is
followed the same way: Hogwild (pytorch/examples' ``mnist_hogwild``, A3C) trains one shared
model in several such processes and none in the parent. Each child that trained hands its report
back, and the parent's report is theirs merged (the parent's own first if it trained too), each
finding naming the processes that found it. DataLoader workers and library processes (a
Manager's server) are not followed: their targets are not the user's.

With the ``fork`` start method (Linux's default before Python 3.14) the child starts as a copy
of the parent, its open watch included: the child first takes that copy down without a report
(``live.watch.leave_inherited``: the copy's files are the parent's), then watches itself.
"""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.process
import os
import pickle
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from traindoc.engine import Report

_REPORT = "report.pkl"
_PROCESS = "process-{}.pkl"
# Targets of these packages are library machinery (a DataLoader worker's loop, a Manager's
# server), not training the user wrote.
_LIBRARY = ("torch", "multiprocessing", "concurrent", "traindoc")
# Where the standard library and installed packages live: a target defined there is not the user's.
_INSTALLED = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "purelib", "platlib")}


class SpawnFollower:
    """Wraps ``start_processes`` while installed; ``report`` is rank 0's report, if one came."""

    def __init__(self, options: Mapping[str, Any], recorder: Any = None) -> None:
        self._options = dict(options)
        self._recorder = recorder  # the parent's own recording, dropped once children train
        self._dirs: list[str] = []
        self._process_dir: str | None = None  # where followed Process children write their reports
        self._processes = 0  # Process children followed so far

    def install(self, patcher: Any) -> None:
        """Through the probes' ``patcher``, which takes it down again."""
        import torch.multiprocessing as tmp

        module = sys.modules["torch.multiprocessing.spawn"]
        original = module.start_processes

        def start_processes(fn: Callable[..., Any], args: tuple[Any, ...] = (), nprocs: int = 1,
                            join: bool = True, daemon: bool = False, start_method: str = "spawn") -> Any:
            if isinstance(fn, _Child):
                return original(fn, args, nprocs, join, daemon, start_method)
            child = self._child(fn, nprocs, start_method == "fork")
            return original(child, args, nprocs, join, daemon, start_method)

        for owner in (module, tmp):  # torch.multiprocessing re-exports it
            patcher.patch(owner, "start_processes", lambda _: start_processes)
        patcher.patch(multiprocessing.process.BaseProcess, "start", self._wrap_start)

    def _wrap_start(self, original: Callable[[Any], None]) -> Callable[[Any], None]:
        def start(process: Any) -> None:
            # ``_target`` is the one place the Process API keeps its target (stdlib, since 2.6).
            target = getattr(process, "_target", None)
            run = type(process).run
            # A subclass's own run() (which need not call the target) is what the child runs.
            overridden = run is not multiprocessing.process.BaseProcess.run
            if not _users(run if overridden else target):
                return original(process)
            if self._process_dir is None:
                self._process_dir = tempfile.mkdtemp(prefix="traindoc-processes-")
                self._dirs.append(self._process_dir)
            # The child gets the process object as start() pickles (or forks) it: ours for that
            # call only. A subclass gets an instance attribute ``run``: its own run, bound.
            fn = functools.partial(run, process) if overridden else target
            assert fn is not None  # _users(None) is False
            forked = (getattr(process, "_start_method", None) or multiprocessing.get_start_method()) == "fork"
            child = _ProcessChild(fn, self._options, self._process_dir, self._processes, forked)
            setattr(process, "run" if overridden else "_target", child)
            self._processes += 1
            try:
                return original(process)
            finally:
                if overridden:
                    del process.run
                else:
                    process._target = target

        return start

    def _child(self, fn: Callable[..., Any], nprocs: int, forked: bool) -> "_Child":
        options = dict(self._options)
        if options.pop("guard", False) and nprocs > 1:
            from traindoc.live.guard import GuardStop, refusal

            raise GuardStop(refusal(nprocs))
        out = tempfile.mkdtemp(prefix="traindoc-spawn-")
        self._dirs.append(out)
        record = self._options.get("record")
        if record and self._recorder is not None:
            self._recorder.discard()  # the parent trains nothing: its children record
            self._recorder = None
        return _Child(fn, options, out, nprocs, forked)

    def report(self, own: Report) -> Report | None:
        """The report of the training the children did, if they wrote one (then the files are
        removed): rank 0's of the last spawned job, else the followed processes' merged."""
        found: Report | None = None
        processes: list[Report] = []
        for out in self._dirs:
            path = Path(out) / _REPORT
            if path.is_file():
                found = _read(path)
            processes += [_read(Path(out) / _PROCESS.format(i)) for i in range(self._processes)
                          if (Path(out) / _PROCESS.format(i)).is_file()]
            shutil.rmtree(out, ignore_errors=True)
        self._dirs.clear()
        self._process_dir, self._processes = None, 0
        if found is None and processes:
            found = _merge_processes(([own] if own.run.get("trained") is not False else []) + processes)
        return found


class _Child:
    """The function a spawned or forked child runs: the user's ``fn`` inside a watch (picklable)."""

    def __init__(self, fn: Callable[..., Any], options: Mapping[str, Any], out: str, nprocs: int,
                 forked: bool) -> None:
        self.fn, self.options, self.out, self.nprocs, self.forked = fn, dict(options), out, nprocs, forked

    def __call__(self, index: int, *args: Any) -> None:
        from traindoc.record import rank_path

        options = dict(self.options)
        if options.get("record"):
            options["record"] = str(rank_path(options["record"], index, self.nprocs))

        def hand_back(watch: Any, report: Report) -> None:
            rank = watch.ranks.rank if watch.ranks is not None else -1
            if rank == 0 or (rank < 0 and index == 0):
                _write(Path(self.out) / _REPORT, report)

        _watched(options, index == 0, lambda: self.fn(index, *args), hand_back, self.forked)


class _ProcessChild:
    """The target a followed ``multiprocessing.Process`` runs: the user's inside a watch."""

    def __init__(self, fn: Callable[..., Any], options: Mapping[str, Any], out: str, index: int,
                 forked: bool) -> None:
        self.fn, self.options, self.out, self.index, self.forked = fn, dict(options), out, index, forked

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from traindoc.record import rank_path

        options = dict(self.options)
        options.pop("guard", None)  # the guard rolls back one model; these processes share it
        if options.get("record"):  # a stream of its own, named as a rank's (the count is not known yet)
            options["record"] = str(rank_path(options["record"], self.index, 2))

        def hand_back(watch: Any, report: Report) -> None:
            if report.run.get("trained") is not False:
                _write(Path(self.out) / _PROCESS.format(self.index), report)

        return _watched(options, self.index == 0, lambda: self.fn(*args, **kwargs), hand_back, self.forked)


def _watched(options: Mapping[str, Any], announce: bool, call: Callable[[], Any],
             hand_back: Callable[[Any, Report], None], forked: bool) -> Any:
    """``call()`` inside a watch with ``options``; ``hand_back(watch, report)`` however it ends.
    A forked child first takes down the parent's watch it was born with."""
    from traindoc.live.watch import Watch, _status, leave_inherited

    if forked:
        leave_inherited()
    watch = Watch(**options, announce=announce)
    watch.__enter__()
    ended: BaseException | None = None
    try:
        return call()
    except BaseException as exc:
        ended = exc
        raise
    finally:
        hand_back(watch, watch.close(_status(ended)))


def _merge_processes(reports: list[Report]) -> Report:
    """One report of several processes that trained (Hogwild): the first one's, with every
    process's findings, each naming the processes that found it (numbered in start order)."""
    from traindoc.analyze import merge_ranks
    from traindoc.events import RankEnd

    size = len(reports)
    ends, found = {}, {}
    for i, r in enumerate(reports):
        steps = r.run.get("steps")
        ends[i] = RankEnd(rank=i, world_size=size, steps=steps if isinstance(steps, int) else 0,
                          status=str(r.run.get("status", "ok")))
        found[i] = list(r.findings)
    report = merge_ranks(reports[0], ends, found, size, unit="process")
    run = report.run  # processes of one script, not the ranks of a distributed job
    run.update(ranks=1, processes=run.pop("world_size"), process_steps=run.pop("rank_steps"),
               process_status=run.pop("rank_status"))
    run.pop("backend", None)
    return report


def _users(target: Any) -> bool:
    """A function of the user's own code, not of a library (torch, the standard library)."""
    if target is None:
        return False
    module = sys.modules.get(getattr(target, "__module__", None) or "")
    if module is None or module.__name__.split(".")[0] in _LIBRARY or isinstance(target, _ProcessChild):
        return False
    if module.__name__ not in ("__main__", "__mp_main__"):
        file = os.path.realpath(getattr(module, "__file__", None) or "")
        if not file or any(file.startswith(lib + os.sep) for lib in _INSTALLED):
            return False
    return True


def _read(path: Path) -> Report:
    with open(path, "rb") as fh:
        report: Report = pickle.load(fh)  # our own file, written by our child a moment ago
    return report


def _write(path: Path, report: Report) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(report, fh)
    tmp.replace(path)
