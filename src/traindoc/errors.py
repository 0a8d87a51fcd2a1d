"""Errors meant for the user: the CLI prints ``Error: <message>`` and exits 2, no traceback."""

from __future__ import annotations

import os
import stat
import sys


class UsageError(Exception):
    """A user mistake (bad path, bad option, unreadable file). The message says what to do."""


def regular_file(path: os.PathLike[str] | str, hint: str) -> None:
    """UsageError unless ``path`` is a regular file (or a link to one). A FIFO, a socket or a
    device would block the read, or never end it; ``hint`` says what to pass instead."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; {hint}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc}); {hint}") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{path}: is a folder; {hint}")
    if not stat.S_ISREG(mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise UsageError(f"{path}: {kind}, not a regular file; {hint}")


def too_deep(where: object, hint: str) -> UsageError:
    """The error for input nested deeper than Python's parsers go (RecursionError)."""
    return UsageError(f"{where}: nested too deeply to read (more than ~{sys.getrecursionlimit():,} levels); "
                      f"{hint}")
