"""``TRAINDOC_FAIL_ON=error|warning|info`` with ``TRAINDOC=1``: the run exits 3 when a finding is
at or above that severity and the script itself succeeded, as ``traindoc run --fail-on`` does.

The script's own failure always wins: an uncaught exception (exit 1), Ctrl-C, or a non-zero
``sys.exit(N)`` / ``exit(N)`` keeps its exit code whatever traindoc found. To know that code,
``arm()`` (called at start-up, before the script runs) notes the argument of ``sys.exit``,
``exit`` and ``quit``; a script that ends with ``raise SystemExit(N)`` itself is not seen, so
for it the code 3 could replace N (the reason ``traindoc run --fail-on`` is the first choice).

Python ignores an exit code set from an exit handler, so the one way to exit 3 is
``os._exit(3)``; it happens in the exit handler that runs last (registered first, at
start-up), after the report and every other handler (logging, W&B, multiprocessing), with the
open files flushed first. What it skips is the interpreter's final clean-up (objects' ``__del__``).
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

from traindoc.findings import SEVERITIES, Finding
from traindoc.integrations._options import at_or_above

if TYPE_CHECKING:  # the engine is imported by the session, not at start-up
    from traindoc.engine import Report

_armed = False
_severity: str | None = None
_failing: list[Finding] = []
_script_code: object = None  # the argument of the script's sys.exit / exit / quit


def severity() -> str | None:
    """``TRAINDOC_FAIL_ON``, or None when it is unset; ValueError for a value that is not one."""
    value = os.environ.get("TRAINDOC_FAIL_ON", "").strip().lower()
    if value and value not in SEVERITIES:
        raise ValueError(f"TRAINDOC_FAIL_ON must be one of {', '.join(SEVERITIES)}, got {value!r}")
    return value or None


def arm() -> None:
    """Before the script runs: note its exit code from now on, and exit 3 at the very end if
    ``judge`` found findings at or above ``TRAINDOC_FAIL_ON``."""
    global _armed, _severity
    if _armed:
        return
    _armed = True
    try:
        _severity = severity()
    except ValueError as exc:  # as with any bad TRAINDOC option: one line, training goes on
        sys.stderr.write(f"traindoc: {exc}; the exit code is left alone\n")
        return
    if _severity is None:
        return
    atexit.register(_exit_3)  # the first registered runs last
    sys.exit = _noting(sys.exit)
    # site's exit() and quit(): made after the .pth files ran (arm's caller), so their class
    quitter = getattr(sys.modules.get("_sitebuiltins"), "Quitter", None)
    if quitter is not None:
        call = quitter.__call__

        def __call__(self: object, code: object = None) -> Any:
            return _noting(functools.partial(call, self))(code)

        quitter.__call__ = __call__


def judge(report: "Report") -> None:
    """The report of the session: its findings at or above ``TRAINDOC_FAIL_ON``."""
    if _severity is not None:
        _failing[:] = at_or_above(report.findings, _severity)


def _noting(orig: Callable[..., Any]) -> Callable[..., Any]:
    def exit(code: object = None) -> Any:
        global _script_code
        _script_code = code
        return orig(code)

    exit.__doc__ = orig.__doc__
    return exit


def _exit_3() -> None:
    script_failed = getattr(sys, "last_value", None) is not None or _script_code not in (None, 0)
    if not _failing or script_failed:
        return
    listed = ", ".join(f"{f.id} ({f.severity})" for f in _failing)
    sys.stderr.write(f"traindoc: exit code 3: {len(_failing)} finding(s) at or above "
                     f"TRAINDOC_FAIL_ON={_severity}: {listed}\n")
    from traindoc.live.ending import flush_files

    flush_files()  # what the interpreter's clean-up would flush: open files
    os._exit(3)
