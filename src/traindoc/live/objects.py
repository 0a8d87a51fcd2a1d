"""The user's code and objects, seen from inside a hook: where a call came from
(``user_site``), which modules a frame holds, and an identity map that forgets dead objects."""

from __future__ import annotations

import os
import sys
import weakref
from types import FrameType
from typing import Any

import torch

_TORCH_DIR = os.path.dirname(torch.__file__)
_OUR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB_DIR = os.path.dirname(os.__file__)


def is_user_file(fn: str) -> bool:
    if fn.startswith(("<", _TORCH_DIR, _OUR_DIR)):
        return False
    return not (fn.startswith(_STDLIB_DIR) and "site-packages" not in fn)


def file_line(fn: str, line: int) -> str:
    """``file:line`` as the user reads it: relative to the working directory when under it, an
    installed package's file from its package (``skorch/classifier.py:154``)."""
    rel = os.path.relpath(fn) if not fn.startswith("<") else fn
    if rel.startswith(".."):
        _, sep, inside = fn.replace(os.sep, "/").rpartition("-packages/")
        rel = inside if sep and inside else fn
    return f"{rel}:{line}"


def is_library_file(fn: str) -> bool:
    """An installed package's file (transformers, lightning, ...), not the user's project."""
    return "site-packages" in fn or "dist-packages" in fn


def user_site(depth: int = 2) -> str:
    """``file:line`` of the innermost frame of the user's own code: outside torch, traindoc,
    the stdlib and installed packages (``model.to(torch.bfloat16)`` called in train.py names
    train.py, not the transformers override it goes through); the innermost installed
    package's frame when no frame is the user's (a training loop run by a library entirely)."""
    frame: FrameType | None = sys._getframe(depth)
    library: tuple[str, int] | None = None  # made a file:line only if no frame is the user's
    while frame is not None:
        fn = frame.f_code.co_filename
        if is_user_file(fn):
            if not is_library_file(fn):
                return file_line(fn, frame.f_lineno)
            library = library or (fn, frame.f_lineno)
        frame = frame.f_back
    return file_line(*library) if library else ""


def library_caller(depth: int = 2) -> str:
    """The top-level package of the innermost installed-package frame between here and the
    user's code (``lightning``, ``transformers``), or "" when the user's code called torch
    directly."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        fn = frame.f_code.co_filename
        if is_user_file(fn):
            if not is_library_file(fn):
                return ""
            tail = fn.replace("\\", "/").split("-packages/", 1)[-1]
            return tail.split("/", 1)[0].removesuffix(".py")
        frame = frame.f_back
    return ""


def variable_name(obj: Any, depth: int = 2, frames: int = 4) -> str:
    """What the user's code calls ``obj`` in the innermost of their frames that holds it: a
    local variable (``q_target``) or an attribute of their ``self`` (``self.teacher``, a
    submodule of a LightningModule included); "" when none of ``frames`` user frames does."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None and frames > 0:
        if is_user_file(frame.f_code.co_filename):
            frames -= 1
            local = frame.f_locals
            for key, value in list(local.items()):
                if value is obj and key != "self":
                    return str(key)
            me = local.get("self")
            for attrs in (getattr(me, "__dict__", None), getattr(me, "_modules", None)):
                for key, value in list(attrs.items()) if isinstance(attrs, dict) else ():
                    if value is obj:
                        return f"self.{key}"
        frame = frame.f_back
    return ""


_MISSING = object()


class ObjectMap:
    """A dict keyed by object identity that ignores dead objects: Python reuses the id of a
    freed tensor or module, so a plain ``dict[id(obj)]`` would hand a new parameter the name,
    initial values or state of an old one."""

    def __init__(self) -> None:
        self._d: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def get(self, obj: Any, default: Any = None) -> Any:
        item = self._d.get(id(obj))
        return item[1] if item is not None and item[0]() is obj else default

    def __contains__(self, obj: Any) -> bool:
        item = self._d.get(id(obj))
        return item is not None and item[0]() is obj

    def __setitem__(self, obj: Any, value: Any) -> None:
        key = id(obj)

        def forget(ref: weakref.ref[Any], d: dict[int, Any] = self._d) -> None:
            if d.get(key, (None,))[0] is ref:  # the entry is still this dead object's
                del d[key]

        self._d[key] = (weakref.ref(obj, forget), value)

    def pop(self, obj: Any, default: Any = None) -> Any:
        value = self.get(obj, _MISSING)
        if value is _MISSING:
            return default
        del self._d[id(obj)]
        return value

    def items(self) -> list[tuple[Any, Any]]:
        return [(o, v) for r, v in self._d.values() if (o := r()) is not None]

    def values(self) -> list[Any]:
        return [v for _, v in self.items()]

    def __len__(self) -> int:
        return len(self._d)


def frame_modules(frame: Any) -> list[Any]:
    """The nn.Modules among the local variables of ``frame`` and its callers."""
    found: list[Any] = []
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, torch.nn.Module) and all(value is not f for f in found):
                found.append(value)
        frame = frame.f_back
    return found


def largest_container(module: Any, candidates: list[Any]) -> Any:
    best, size = module, sum(1 for _ in module.modules())
    for cand in candidates:
        n = sum(1 for _ in cand.modules())
        if n > size and any(m is module for m in cand.modules()):
            best, size = cand, n
    return best
