"""A warning raised while traindoc stands between the user's call and torch names the user's
line, as without traindoc.

Python attributes a warning to the frame ``stacklevel`` levels up, and torch's C++ warnings to
the innermost Python frame. With the op mode's ``__torch_function__`` or one of traindoc's
wrappers between the user's call and torch, that frame is traindoc's: `torch.tensor` of a list
of arrays on a sampled step warned at ``live/probes/_ops.py:262`` instead of the user's line,
and, keyed on that line, was shown again by the next unsampled step. While traindoc watches,
``warnings.showwarning`` (the hook Python documents for replacing) sends such a warning back
through ``warnings.warn_explicit`` at the user's frame, so the user's filters and registry
decide, once per user line, as in a bare run.

Only frames entered through an ``entry`` (a wrapper the user's call goes through, the mode's
handler) are moved: a warning of traindoc's own hook code stays at its own line. A filter of
the user's that names a module (``filterwarnings(module=...)``) meets traindoc's module on the
first pass; ``catch_warnings(record=True)`` records traindoc's line (it bypasses the hook).
"""

from __future__ import annotations

import os
import sys
import warnings
from types import CodeType, FrameType
from typing import Any, Callable

_LIVE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_entries: set[CodeType] = set()


def entry(fn: Any) -> Any:
    """Mark ``fn`` (a function, method or classmethod) as a place where a user's call enters
    traindoc on its way to torch; returns it."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if isinstance(code, CodeType):
        _entries.add(code)
    return fn


def _sites(filename: str, lineno: int) -> tuple[FrameType, FrameType] | None:
    """(traindoc's frame the warning names, the frame that called into traindoc), when the
    outermost traindoc frame between them is an entry."""
    f: FrameType | None = sys._getframe(1)
    while f is not None and (f.f_code.co_filename != filename or f.f_lineno != lineno):
        f = f.f_back
    named, outermost = f, None
    while f is not None and f.f_code.co_filename.startswith(_LIVE):
        outermost, f = f, f.f_back
    if named is None or f is None or outermost is None or outermost.f_code not in _entries:
        return None
    return named, f


def attributed(previous: Callable[..., Any]) -> Callable[..., Any]:
    """``warnings.showwarning`` that moves a warning named at a traindoc entry's frame to the
    caller's, then shows it through ``previous``."""

    def showwarning(message: Any, category: Any, filename: str, lineno: int,
                    file: Any = None, line: Any = None) -> Any:
        sites = _sites(filename, lineno) if str(filename).startswith(_LIVE) else None
        if sites is None:
            return previous(message, category, filename, lineno, file, line)
        named, user = sites
        # Forget it at traindoc's line, or the user's next line that warns the same through
        # it would be taken as already shown.
        registry = named.f_globals.get("__warningregistry__")
        if isinstance(registry, dict):
            registry.clear()
        where, at = user.f_code.co_filename, user.f_lineno
        if file is not None:  # showwarning called by hand, with a stream: show it there
            return previous(message, category, where, at, file, None)
        g = user.f_globals
        warnings.warn_explicit(message, category, where, at, module=g.get("__name__"),
                               registry=g.setdefault("__warningregistry__", {}), module_globals=g)
        return None

    return showwarning
