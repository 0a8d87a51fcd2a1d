"""However a run ends, the report is written and the script ends as it would without traindoc.

What ``traindoc run``, ``traindoc.watch()`` and ``TRAINDOC=1`` share for the ways a run ends
that no ``finally`` sees:

- SIGTERM and SIGHUP (a scheduler's preemption or time limit, torchrun's agent, a closed
  terminal): ``Signals`` handles them while their disposition is the default one, writes the
  report, then ends by the same signal (the exit status a launcher sees is the signal's). A
  signal the script ignores or handles itself is left alone: its own handler runs as without
  traindoc (``sys.exit`` in it ends the run through the ordinary path, which reports; returning
  lets training go on). A forked child (a DataLoader worker) that inherits the handler ends as
  by default, without a report: its parent reports.
- Training that goes on in non-daemon threads after the main body returned: ``wait_for_threads``
  does, before the report, what the interpreter does first at exit.
- An uncaught exception: ``show_exception`` prints it through ``sys.excepthook``, the user's own
  if the script set one.
- Ctrl-C: Python ends a run that Ctrl-C stopped by SIGINT itself, after the exit handlers;
  ``arm_exit`` (before the script runs) and ``end_by_signal_at_exit`` do the same.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import signal
import sys
import threading
from types import FrameType, TracebackType
from typing import Callable

# The signals that end a run by default without any Python code running, and the status the
# report gives each (the words a shell prints for them).
SIGNALS: dict[int, str] = {signal.SIGTERM: "terminated"}
if hasattr(signal, "SIGHUP"):  # POSIX only
    SIGNALS[signal.SIGHUP] = "hangup"


def exit_code(signum: int) -> int:
    """The exit code a shell (and SLURM) reports for death by ``signum``."""
    return 128 + signum


class Signals:
    """While installed, SIGTERM and SIGHUP call ``end(status, exit_code)`` (which writes the
    report), then end the process by the same signal. Installed from the main thread only, and
    only for a signal whose disposition is the default: one the script (or ``nohup``) ignores or
    handles stays as it is."""

    def __init__(self, end: Callable[[str, int], object]) -> None:
        self._end = end
        self._installed: list[int] = []
        self._busy = False  # the report is being written
        self._pending: int | None = None  # a signal that came meanwhile
        self._handler = self._handle  # one bound method, compared by identity below
        self._pid = os.getpid()

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal.signal works in the main thread only
        for signum in SIGNALS:
            try:
                if signal.getsignal(signum) == signal.SIG_DFL:
                    signal.signal(signum, self._handler)
                    self._installed.append(signum)
            except (OSError, ValueError):  # an embedding that forbids it: no report on this signal
                pass

    def uninstall(self) -> None:
        """The default disposition again, where ours is still the one installed."""
        for signum in self._installed:
            try:
                if signal.getsignal(signum) is self._handler:
                    signal.signal(signum, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        self._installed.clear()

    def reporting(self) -> "_Reporting":
        """``with signals.reporting():`` around writing the report at an ordinary end: a signal
        meanwhile lets the report finish, then ends the process by that signal."""
        return _Reporting(self)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signal.getsignal(signum) is not self._handler:
            # The script's own handler replaced ours and now calls the handler it replaced: in
            # place of the default it would not have called anything, so neither do we.
            return
        if os.getpid() != self._pid:  # a forked child (a DataLoader worker) inherited us: the
            die_by(signum, flush=_flush_nothing)  # parent reports; the child ends as by default
        if self._busy:
            self._pending = signum
            return
        self._busy = True
        try:
            self._end(SIGNALS[signum], exit_code(signum))
        except BaseException as exc:  # never keep a process alive that was told to end
            _say(f"traindoc: internal error writing the report on {signal.Signals(signum).name}: "
                 f"{type(exc).__name__}: {exc}")
        die_by(signum, flush=_flush_std)


class _Reporting:
    def __init__(self, signals: Signals) -> None:
        self.signals = signals

    def __enter__(self) -> None:
        self.signals._busy = True

    def __exit__(self, *exc: object) -> None:
        pending = self.signals._pending
        self.signals.uninstall()
        if pending is not None:
            die_by(pending, flush=_flush_std)


def die_by(signum: int, flush: Callable[[], None]) -> None:
    """End the process by ``signum`` with its default action, as if traindoc had not caught it
    (what CPython itself does after an uncaught KeyboardInterrupt), after ``flush()``."""
    flush()
    try:
        signal.signal(signum, signal.SIG_DFL)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
    except (OSError, ValueError):
        pass
    os._exit(exit_code(signum))  # the signal could not end us: its exit code, as a shell shows it


def _flush_nothing() -> None:
    pass


def _flush_std() -> None:
    """A default SIGTERM flushes nothing: only what traindoc wrote (the report, ``--json -``)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def flush_files() -> None:
    """Flush every open file (what the interpreter's clean-up would flush before exiting)."""
    for obj in gc.get_objects():
        if issubclass(type(obj), io.IOBase):  # type(): isinstance may run an object's __class__
            try:
                if not obj.closed:
                    obj.flush()
            except Exception:  # a broken pipe, a file closed under us: nothing to save there
                pass


# ---- the main body ended -----------------------------------------------------------------------
def wait_for_threads() -> None:
    """Wait, as the interpreter's exit does first, for the non-daemon threads still running (and
    run threading's exit hooks, which stop idle ThreadPoolExecutor workers) so that training
    that goes on in a thread is in the report. The interpreter's own call later finds this done.
    Only from the main thread, only when such a thread is alive."""
    me = threading.current_thread()
    if me is not threading.main_thread():
        return
    if not any(t is not me and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    shutdown = getattr(threading, "_shutdown", None)  # what Py_FinalizeEx calls (3.9 to 3.13)
    if shutdown is not None:
        shutdown()


def show_exception(exc: BaseException, tb: TracebackType | None) -> None:
    """What the interpreter does with an uncaught exception: note it in ``sys.last_*`` and call
    ``sys.excepthook`` (the script's own, if it set one); a hook that raises is reported as
    Python reports it, then the exception is printed plainly."""
    import traceback

    exc.__traceback__ = tb  # the traceback as `python script.py` has it, without our frames
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = exc  # type: ignore[attr-defined]  # new in 3.12
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException as hook_error:
        _say("Error in sys.excepthook:")
        traceback.print_exception(type(hook_error), hook_error, hook_error.__traceback__)
        _say("\nOriginal exception was:")
        traceback.print_exception(type(exc), exc, tb)
    sys.stderr.flush()


# ---- Ctrl-C ------------------------------------------------------------------------------------
_die_at_exit: int | None = None
_armed = False


def arm_exit() -> None:
    """Before the script runs: register the exit handler that ends the process by a signal
    (``end_by_signal_at_exit``). Registered before the script's own, it runs after them."""
    global _armed
    if not _armed:
        _armed = True
        atexit.register(_at_exit)


def end_by_signal_at_exit(signum: int) -> None:
    """End by ``signum`` once the exit handlers ran: CPython's way out after an uncaught
    KeyboardInterrupt (SIGINT, so a shell sees 130 and a parent sees death by SIGINT)."""
    global _die_at_exit
    _die_at_exit = signum


def _at_exit() -> None:
    if _die_at_exit is not None:  # the interpreter's exit would flush every open file
        die_by(_die_at_exit, flush=flush_files)


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:  # stderr closed or reentered: nowhere to say it
        pass


__all__ = ["SIGNALS", "Signals", "arm_exit", "die_by", "end_by_signal_at_exit", "exit_code",
           "flush_files", "show_exception", "wait_for_threads"]
