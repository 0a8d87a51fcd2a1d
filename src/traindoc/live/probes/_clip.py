"""Gradient clipping observed without replacing torch's clipping functions.

torch's ``clip_grad_norm_``, ``clip_grad_value_`` and ``_clip_grads_with_norm_`` (which is
``torch.nn.utils.clip_grads_with_norm_`` under another name, and what ``clip_grad_norm_`` clips
with, handed the norm it measured) are each a small ``_no_grad_wrapper`` that runs the real
function, held in its closure, under ``torch.no_grad()``. traindoc puts its dispatcher into
that closure cell: the names the user, their own patches and ``inspect`` see stay torch's own
function objects, and every way to clip (the public names, torch's internal call, a reference
taken before traindoc started) passes one dispatcher, once. Where a torch lays these out
otherwise, the module attributes are wrapped instead (the old way; docs/live-patches.md).

Probes ``listen`` with a ``before(call)`` (which may replace ``call.args``: a generator of
parameters read by one probe is handed on as a list) and an ``after(call)``; befores run
latest-registered first, afters in registration order, as nested wrappers would."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import torch

from traindoc.live import warning_site
from traindoc.live.probes._ops import is_traced
from traindoc.live.session import Session

ClipHook = Callable[["ClipCall"], None]

# torch >= 2.6 clips in _clip_grads_with_norm_ (clip_grad_norm_ measures, then calls it); before,
# clip_grad_norm_ clipped inline. clip_grad_value_ has no inner call.
_ENTRIES = ("_clip_grads_with_norm_", "clip_grad_value_") \
    if hasattr(torch.nn.utils.clip_grad, "_clip_grads_with_norm_") else ("clip_grad_norm_", "clip_grad_value_")
_CLIP_FILE = torch.nn.utils.clip_grad.__file__


class ClipCall:
    """One clipping call: ``fn`` as the user wrote it (``clip_grad_norm_``,
    ``clip_grads_with_norm_``, ``clip_grad_value_``), its arguments, and after it ``out``.
    ``scale``: the GradScaler scale the gradients still carry (set by the AMP probe)."""

    __slots__ = ("fn", "args", "kwargs", "out", "scale")

    def __init__(self, fn: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.out: Any = None
        self.scale: torch.Tensor | None = None

    @property
    def limit(self) -> float:
        """``max_norm`` (``clip_value`` for value clipping)."""
        name = "clip_value" if self.fn == "clip_grad_value_" else "max_norm"
        return float(self.args[1] if len(self.args) > 1 else self.kwargs.get(name, 0.0))

    @property
    def norm(self) -> Any:
        """The total norm before clipping: handed in (torch >= 2.6), or returned (older
        ``clip_grad_norm_``); None for value clipping."""
        if self.fn == "clip_grad_value_":
            return None
        if "_clip_grads_with_norm_" not in _ENTRIES:
            return self.out
        return self.args[2] if len(self.args) > 2 else self.kwargs.get("total_norm")


class ClipEntry:
    def __init__(self, session: Session) -> None:
        self._session = session
        self._hooks: list[tuple[str, ClipHook | None, ClipHook | None]] = []
        self._before: list[tuple[str, ClipHook]] = []
        self._after: list[tuple[str, ClipHook]] = []
        self._wired: list[tuple[Any, Any, Any]] = []  # (cell, torch's function, ours)
        self._patched: list[tuple[Any, str, Any, Any]] = []  # the fallback: owner, name, orig, ours

    def listen(self, probe: str, before: ClipHook | None = None, after: ClipHook | None = None) -> None:
        if not self._wired and not self._patched:
            self._wire()
        self._hooks.append((probe, before, after))
        self._before = [(p, b) for p, b, _ in reversed(self._hooks) if b is not None]
        self._after = [(p, a) for p, _, a in self._hooks if a is not None]

    def close(self) -> None:
        for cell, orig, ours in reversed(self._wired):
            if cell.cell_contents is ours:
                cell.cell_contents = orig
        for owner, name, orig, ours in reversed(self._patched):
            if getattr(owner, name) is ours:  # a patch of the user's on top stays
                setattr(owner, name, orig)
        self._wired.clear()
        self._patched.clear()
        self._hooks.clear()
        self._before = self._after = []

    def _wire(self) -> None:
        clip = torch.nn.utils.clip_grad
        for name in _ENTRIES:
            outer = getattr(clip, name)
            cell = _func_cell(outer)
            if cell is not None:
                ours = self._dispatcher(cell.cell_contents, name)
                self._wired.append((cell, cell.cell_contents, ours))
                cell.cell_contents = ours
                continue
            ours = self._dispatcher(outer, name)
            for owner in (clip, torch.nn.utils):  # the function under each of its names
                for attr, value in list(vars(owner).items()):
                    if value is outer:
                        self._patched.append((owner, attr, outer, ours))
                        setattr(owner, attr, ours)

    def _dispatcher(self, orig: Any, name: str) -> Any:
        entry = self

        @functools.wraps(orig)
        def clip(*args: Any, **kwargs: Any) -> Any:
            if is_traced() or not entry._hooks:
                return orig(*args, **kwargs)
            session = entry._session
            call = ClipCall(_user_name(name), list(args), kwargs)
            for probe, before in entry._before:  # call_each, written out: every step that clips
                if probe not in session.failed:
                    try:
                        before(call)
                    except Exception as exc:  # never let traindoc break the user's training
                        session.fail(probe, exc)
            call.out = orig(*call.args, **call.kwargs)
            for probe, after in entry._after:
                if probe not in session.failed:
                    try:
                        after(call)
                    except Exception as exc:  # never let traindoc break the user's training
                        session.fail(probe, exc)
            return call.out

        return warning_site.entry(clip)


def _func_cell(outer: Any) -> Any:
    """The closure cell holding the function torch's ``_no_grad_wrapper`` runs, or None."""
    code = getattr(outer, "__code__", None)
    if code is None or code.co_name != "_no_grad_wrapper" or "func" not in code.co_freevars:
        return None
    return outer.__closure__[code.co_freevars.index("func")]


def _user_name(entry: str) -> str:
    """What the user called: ``_clip_grads_with_norm_`` is reached from torch's own
    ``clip_grad_norm_`` or called directly under its public name ``clip_grads_with_norm_``."""
    if entry != "_clip_grads_with_norm_":
        return entry
    frame = sys._getframe(2)  # _user_name <- our dispatcher <- its caller
    if frame.f_code.co_name == "_no_grad_wrapper" and frame.f_back is not None:
        frame = frame.f_back
    code = frame.f_code
    if code.co_name == "clip_grad_norm_" and code.co_filename == _CLIP_FILE:
        return "clip_grad_norm_"
    return "clip_grads_with_norm_"
