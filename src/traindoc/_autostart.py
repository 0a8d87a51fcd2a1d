"""``TRAINDOC=1 python train.py``: the live doctor with no code change and no ``-m traindoc run``,
for launchers where that cannot be inserted (SLURM scripts, ``mp.spawn``, ``accelerate launch``).

The package installs ``traindoc-autostart.pth`` (setup.py), whose one line Python runs at every
start-up: it reads one environment variable and, only when ``TRAINDOC`` is set (and not 0),
imports this module and calls ``install()``. Unset, the cost is that one dictionary lookup.

``install()`` waits for ``torch``: the session opens right after the script's own ``import torch``
finished, so a Python process that never imports torch (pip, a tokenizer helper) pays nothing,
and the probes are in place before any model or optimizer exists. At exit (after the
non-daemon threads ended, and also on SIGTERM or SIGHUP, before the process ends by that signal:
live/ending.py) the report goes to stderr, as with ``traindoc run``, from each process that trained (a launcher or a DataLoader
worker that never trained says nothing); under torchrun only rank 0 reports. A script that
starts its ranks with ``mp.spawn`` (the ``spawn`` or ``forkserver`` start method) gives one
report too, the parent's: its session follows the children (``live/spawn.py``), which do not
autostart, and takes rank 0's report with the other ranks' findings merged in; so does one that
trains in ``multiprocessing.Process`` children of its own (Hogwild). Children made with the
``fork`` start method are not followed and nothing reports for them.

Options, from the environment: ``TRAINDOC_JSON``, ``TRAINDOC_HTML`` (report files),
``TRAINDOC_LEVEL`` (cheap | standard | thorough), ``TRAINDOC_FAIL_ON`` (error | warning | info:
exit 3 on findings at or above it when the script succeeded; integrations/fail_on.py). The
``traindoc`` command itself never autostarts (it opens its own session), and a framework
callback joins the session opened here.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_watch: Any = None
_signals: Any = None
_installed = False
_die_by: int | None = None  # the signal that ends the process after the exit handlers


def install() -> None:
    """Open the session once torch is imported (now, if it already is)."""
    from traindoc.config import autostart_enabled

    global _installed
    if _installed or not autostart_enabled():
        return
    _installed = True
    import atexit

    atexit.register(_last)  # registered first, runs last: after every other exit handler
    if os.environ.get("TRAINDOC_FAIL_ON"):  # exit 3 on findings (integrations/fail_on.py)
        from traindoc.integrations import fail_on

        fail_on.arm()
    if "torch" in sys.modules:
        _start()
    else:
        sys.meta_path.insert(0, _AfterImport("torch", _start))


def _is_traindoc_cli() -> bool:
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    name = os.path.basename(argv0)
    return name in ("traindoc", "traindoc.exe") or (
        name == "__main__.py" and os.path.basename(os.path.dirname(argv0)) == "traindoc")


def _is_torch_worker() -> bool:
    """A process of torch's own (inductor's compile workers run a script inside torch): it never
    trains, and ``traindoc run`` hands ``TRAINDOC=1`` to every child of the script."""
    torch_file = getattr(sys.modules.get("torch"), "__file__", None) or ""
    argv0 = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return bool(torch_file and argv0) and argv0.startswith(os.path.dirname(os.path.realpath(torch_file)) + os.sep)


def _start() -> None:
    global _watch, _signals
    # A multiprocessing spawn child (mp.spawn's ranks, DataLoader workers) inherits TRAINDOC:
    # the parent's session follows the ranks itself (live/spawn.py) and workers never train.
    if _watch is not None or _is_traindoc_cli() or "--multiprocessing-fork" in sys.orig_argv or _is_torch_worker():
        return
    try:
        from traindoc.live.ending import Signals
        from traindoc.live.watch import Watch

        level = os.environ.get("TRAINDOC_LEVEL", "standard")
        _watch = Watch(level=level)
        _signals = Signals(_end)  # taken before the watch's own: the report with our outputs
        _signals.install()
        _watch.__enter__()
    except Exception as exc:  # a bad option or an internal error: one line, training goes on
        _watch = None
        if _signals is not None:
            _signals.uninstall()
        sys.stderr.write(f"traindoc: TRAINDOC=1 could not start: {type(exc).__name__}: {exc}\n")
        return
    import atexit
    import multiprocessing.util

    atexit.register(_finish)
    # A multiprocessing child (mp.spawn's training processes) leaves through os._exit, which
    # skips atexit; multiprocessing runs its own finalizers first.
    multiprocessing.util.Finalize(None, _finish, exitpriority=0)


def _finish() -> None:
    global _die_by
    last = getattr(sys, "last_value", None)  # set by the interpreter for an uncaught exception
    if isinstance(last, KeyboardInterrupt):
        _end("interrupted", 130)
        # CPython would end by SIGINT after the exit handlers, but the report's code (an exec
        # of a dataclass) clears the interpreter's note of the KeyboardInterrupt: _last does.
        import signal

        _die_by = signal.SIGINT
    elif last is not None:
        _end("exception", 1)
    else:
        _end("ok", 0)


def _last() -> None:
    if _die_by is not None:
        from traindoc.live import ending

        ending.die_by(_die_by, flush=ending.flush_files)


def _end(status: str, code: int) -> None:
    """Close the session and give the report, once (at exit, or on SIGTERM/SIGHUP)."""
    global _watch
    doc, _watch = _watch, None
    if doc is None:
        return
    if _signals is not None:
        with _signals.reporting():  # a signal now waits for the report, then ends the process
            _give(doc.close(status, code), doc)
    else:
        _give(doc.close(status, code), doc)


def _give(report: Any, doc: Any) -> None:
    # Rank 0 speaks for the job: the rank of the group the script joined (Lightning's ranks
    # started by re-running the script know theirs only from it), else torchrun's RANK.
    rank = doc.ranks.rank if doc.ranks is not None and doc.ranks.rank >= 0 else int(os.environ.get("RANK", "0"))
    if report.run.get("trained") is False or rank != 0:
        return
    import argparse

    from traindoc.report import output

    args = argparse.Namespace(json=os.environ.get("TRAINDOC_JSON") or None,
                              html=os.environ.get("TRAINDOC_HTML") or None, fail_on=None)
    output.emit(report, args)
    if os.environ.get("TRAINDOC_FAIL_ON"):
        from traindoc.integrations import fail_on

        fail_on.judge(report)


class _AfterImport:
    """A meta-path finder that loads nothing itself: it lets the other finders find ``name``
    and calls ``then()`` once that module has executed, then steps aside."""

    def __init__(self, name: str, then: Any) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        try:
            from importlib.util import find_spec

            spec = find_spec(fullname)
            loader = spec.loader if spec is not None else None
            exec_module = getattr(loader, "exec_module", None)
            if exec_module is None:
                return spec
            then = self.then

            def exec_then_start(module: Any) -> None:
                exec_module(module)
                then()

            setattr(loader, "exec_module", exec_then_start)  # this one import's loader, on purpose
            return spec
        except Exception:  # never break the user's import
            return None
