"""Following ``torch.multiprocessing.spawn``: a script that starts its own ranks.

``traindoc run train.py`` where train.py calls ``mp.spawn(worker, nprocs=N)``: the training runs
in the N children, not in the process traindoc started. While a watch is open, torch's
``start_processes`` (which ``mp.spawn`` calls) is wrapped so that each child runs ``worker``
inside a watch of its own, with the parent's options; the child that is rank 0 of the job's
process group (the child with index 0 when the group was never joined) hands its report back
through a file, and the parent's report becomes that one. ``--record`` gives each child its own
stream (``record.rank_path``). Only the ``spawn`` and ``forkserver`` start methods are followed:
a forked child inherits the parent's open watch, half-copied, and is left alone.
"""

from __future__ import annotations

import pickle
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from traindoc.engine import Report

_REPORT = "report.pkl"


class SpawnFollower:
    """Wraps ``start_processes`` while installed; ``report`` is rank 0's report, if one came."""

    def __init__(self, options: Mapping[str, Any], recorder: Any = None) -> None:
        self._options = dict(options)
        self._recorder = recorder  # the parent's own recording, dropped once children train
        self._dirs: list[str] = []

    def install(self, patcher: Any) -> None:
        """Through the probes' ``patcher``, which takes it down again."""
        import torch.multiprocessing as tmp

        module = sys.modules["torch.multiprocessing.spawn"]
        original = module.start_processes

        def start_processes(fn: Callable[..., Any], args: tuple[Any, ...] = (), nprocs: int = 1,
                            join: bool = True, daemon: bool = False, start_method: str = "spawn") -> Any:
            if start_method == "fork" or isinstance(fn, _Child):
                return original(fn, args, nprocs, join, daemon, start_method)
            return original(self._child(fn, nprocs), args, nprocs, join, daemon, start_method)

        for owner in (module, tmp):  # torch.multiprocessing re-exports it
            patcher.patch(owner, "start_processes", lambda _: start_processes)

    def _child(self, fn: Callable[..., Any], nprocs: int) -> "_Child":
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
        return _Child(fn, options, out, nprocs)

    def report(self) -> Report | None:
        """Rank 0's report of the last spawned job that wrote one (then the files are removed)."""
        found: Report | None = None
        for out in self._dirs:
            path = Path(out) / _REPORT
            if path.is_file():
                with open(path, "rb") as fh:
                    found = pickle.load(fh)  # our own file, written by our child a moment ago
            shutil.rmtree(out, ignore_errors=True)
        self._dirs.clear()
        return found


class _Child:
    """The function a spawned child runs: the user's ``fn`` inside a watch (picklable)."""

    def __init__(self, fn: Callable[..., Any], options: Mapping[str, Any], out: str, nprocs: int) -> None:
        self.fn, self.options, self.out, self.nprocs = fn, dict(options), out, nprocs

    def __call__(self, index: int, *args: Any) -> None:
        from traindoc.live.watch import Watch
        from traindoc.record import rank_path

        options = dict(self.options)
        if options.get("record"):
            options["record"] = str(rank_path(options["record"], index, self.nprocs))
        watch = Watch(**options, announce=index == 0)
        watch.__enter__()
        status = "exception"
        try:
            self.fn(index, *args)
            status = "ok"
        except SystemExit:
            status = "exit"
            raise
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            report = watch.close(status)
            rank = watch.ranks.rank if watch.ranks is not None else -1
            if rank == 0 or (rank < 0 and index == 0):
                _write(Path(self.out) / _REPORT, report)


def _write(path: Path, report: Report) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(report, fh)
    tmp.replace(path)
