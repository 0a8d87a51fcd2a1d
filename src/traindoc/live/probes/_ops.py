"""Op-level observation without replacing torch's functions: a ``TorchFunctionMode`` that is on
the mode stack only inside the windows probes hold (a sampled training step, an evaluation).

Probes ``listen`` to torch functions (``torch.where``, ``Tensor.masked_fill``,
``F.cross_entropy`` ...): the mode runs the function exactly as the user called it (the mode
is off the stack while it does, so a tensor subclass's ``__torch_function__`` sees the call as
without traindoc) and hands the arguments and the result to the listeners. The functions the
user, TorchScript and ``torch.fx`` see stay torch's own.

A window opens with ``hold(key)`` and closes when every key is released. The mode is not
pushed at once: a global forward pre hook waits for the window's first forward of a module
with parameters, and pushes it there, then removes itself. That module tells whether the model
is ``torch.compile``'d: then no mode and no global hook of traindoc is put up for the rest of
the run (``session.compiled``), so dynamo guards and compiles exactly what a bare run has. A
backward pauses the mode (re-armed for the next micro-batch's forward): backward and the
optimizer step run without it.

Stack discipline: the mode goes to the bottom of the mode stack and is taken out from where it
is, so that a mode of the user's (``with torch.device(...)``, ``set_default_device``, a
FlopCounterMode) stays where it was and is popped by its own ``__exit__``; it is first in
line, and hands on to ours. Only the thread that pushed the mode takes it out.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import weakref
from typing import Any, Callable, Iterable

import torch
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode

from traindoc.live.session import Session
from traindoc.live.warning_site import entry

Listener = Callable[[Any, tuple[Any, ...], dict[str, Any], Any], None]
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OUR_DIR = os.path.dirname(os.path.dirname(os.path.dirname(__file__))) + os.sep


class OpsWatch:
    def __init__(self, session: Session, guard: Callable[..., None]) -> None:
        self.s = session
        self._guard = guard
        self._table: dict[Any, list[tuple[str, Listener, str | None]]] = {}
        self._early: dict[Any, list[tuple[str, Listener, str | None]]] = {}  # called before the function
        self._holds: set[str] = set()
        self._own: set[str] = set()  # windows only their own listeners see
        self._mode: _Mode | None = None  # ours, while on the stack
        self._thread = 0  # the thread whose stack holds it
        self._retired: _Mode | None = None  # taken off while torch runs a call through it: it comes back
        self._hook: Any = None  # waiting for the window's first forward
        self._settler: Any = None  # waiting for the next forward, to take off a retired mode
        self.hits = 0  # calls handed to a listener so far (a window whose ops reach none can go)

    def listen(self, probe: str, funcs: Iterable[Any], fn: Listener, own: str | None = None,
               before: Listener | None = None) -> None:
        """Call ``fn(func, args, kwargs, out)`` after each call of one of ``funcs`` made inside
        a held window (``func`` as torch passes it: ``torch.where``, ``torch.Tensor.masked_fill``),
        and ``before(func, args, kwargs, None)`` ahead of it. ``own``: a window of this
        listener's, which the others do not see (while only such windows are held, only their
        listeners are called)."""
        if own is not None:
            self._own.add(own)
        for func in funcs:
            self._table.setdefault(func, []).append((probe, fn, own))
            if before is not None:
                self._early.setdefault(func, []).append((probe, before, own))

    def unlisten(self, probe: str) -> None:
        """``probe`` has no more use for its listeners: the functions only it listened to go
        back to the mode's fast path (new lists: a call in progress keeps its own)."""
        for table in (self._table, self._early):
            for func, listeners in list(table.items()):
                kept = [entry for entry in listeners if entry[0] != probe]
                if kept:
                    table[func] = kept
                else:
                    del table[func]

    def hold(self, key: str, now: bool = False) -> None:
        """Open (or keep open) a window for ``key``; ``now``: the mode goes up at once, not at
        the window's first forward (the first forward still checks for a compiled model), and
        not at all once dynamo has compiled something: a compiled function (an optimizer step)
        may be called in the window, and dynamo would compile it again for the mode."""
        if now and dynamo_compiled():
            return
        self._holds.add(key)
        if now and self._table:
            self._push()
        self._arm()

    def held(self, key: str) -> bool:
        return key in self._holds

    def release(self, key: str) -> None:
        self._holds.discard(key)
        if not self._holds:
            self._disarm()
            self._pop()

    def pause(self, rearm: bool = True) -> None:
        """A backward starts: the mode goes off until the next forward of a held window (with
        ``rearm`` false: until ``rearm()``). A listener's own window ends here at the latest
        (its closing hook may not have run: an optimizer step compiled by dynamo calls no hook)."""
        self._holds -= self._own
        if self._mode is not None:
            self._pop()
            if rearm:
                self._arm()
            elif self._retired is not None and self._settler is None:
                # It comes back when the backward returns; the next forward takes it off.
                self._settler = register_module_forward_pre_hook(self._settle_pre)
        if not self._holds:
            self._disarm()

    def rearm(self) -> None:
        """The mode goes up again at the next forward of a held window."""
        if self._mode is None:
            self._arm()

    def close(self) -> None:
        self._holds.clear()
        self._disarm()
        self._unsettle()
        self._pop()
        self._retired = None  # at worst a retired mode stays, calling through

    @property
    def active(self) -> bool:
        return self._mode is not None

    def aside(self) -> _Mode | None:
        """Take the mode off while traindoc measures inside a window (a sampled forward's
        hooks): our own tensor ops then cost no Python call each, and no listener sees them.
        Only when ours is the thread's one mode (two C calls); under a mode of the user's it
        stays where it is. Returns what ``back`` puts back."""
        if self._mode is None or torch._C._len_torch_function_stack() != 1:
            return None
        mode = torch._C._pop_torch_function_stack()
        if mode is not self._mode:  # another thread's watch, or one retired: leave it
            torch._C._push_on_torch_function_stack(mode)
            return None
        return mode

    @staticmethod
    def back(mode: _Mode | None) -> None:
        if mode is not None:
            torch._C._push_on_torch_function_stack(mode)

    # ---- the hook that pushes the mode ---------------------------------------------------------
    def _arm(self) -> None:
        if self._holds and self._hook is None and self._table and not self.s.compiled:
            self._hook = register_module_forward_pre_hook(self._pre)

    def _disarm(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _pre(self, module: Any, args: Any) -> None:
        if is_traced() or next(module.parameters(), None) is None:
            return
        self._disarm()
        if is_compiled_module(module):  # before dynamo looks at the mode stack and the hooks
            self.close()
            self.s.mark_compiled()
            return
        if self._holds:
            self._push()

    def _push(self) -> None:
        if self._mode is None and not self.s.compiled:
            if self._retired is not None and threading.get_ident() == self._thread:
                # Torch took ours off to run a call through it (the backward whose callbacks
                # open a window now) and puts it back where it was when the call returns: it is
                # the mode again. A second one under it would see every call twice.
                self._mode, self._retired = self._retired, None
                return
            mode = _Mode(self)
            self._restack(bottom=mode)
            self._mode, self._retired, self._thread = mode, None, threading.get_ident()
            _pushed.add(self)

    def _pop(self) -> None:
        if threading.get_ident() == self._thread and (self._mode is not None or self._retired is not None):
            mode = self._mode or self._retired
            self._mode = None
            # Not on the stack: torch took it off to run a call through it (a backward started
            # by ``loss.backward()`` passes through the mode) and puts it back when that call
            # returns; ``settle`` takes it off then.
            self._retired = None if self._restack() else mode

    def settle(self) -> None:
        """Take off a mode that came back on the stack after it was retired (see ``_pop``):
        called where the training loop passes between a backward and the next forward."""
        if self._retired is not None and threading.get_ident() == self._thread and self._restack():
            self._retired = None
            self._unsettle()

    def _settle_pre(self, module: Any, args: Any) -> None:
        if not is_traced():
            self.settle()
            self._unsettle()

    def _unsettle(self) -> None:
        if self._settler is not None:
            self._settler.remove()
            self._settler = None

    def _restack(self, bottom: _Mode | None = None) -> bool:
        """Take every mode of ours off this thread's stack, put ``bottom`` (if any) at its
        bottom, and the user's modes back above it in their order; whether one of ours was there."""
        kept: list[Any] = []
        found = False
        try:
            while torch._C._len_torch_function_stack():
                kept.append(torch._C._pop_torch_function_stack())
        finally:
            if bottom is not None:
                torch._C._push_on_torch_function_stack(bottom)
            for m in reversed(kept):
                if isinstance(m, _Mode) and m.watch is self:
                    found = True
                else:
                    torch._C._push_on_torch_function_stack(m)
        return found

    def _call(self, table: dict[Any, list[tuple[str, Listener, str | None]]], func: Any,
              args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        listeners = table.get(func)
        if listeners and self._holds:
            shared = not self._holds <= self._own
            for probe, fn, own in listeners:
                if shared or own in self._holds:
                    self.hits += 1
                    self._guard(probe, fn, func, args, kwargs, out)


class _Mode(TorchFunctionMode):
    """Calls through, then tells the watch. Inside ``__torch_function__`` torch has taken the
    mode off the stack, so ``func`` runs as the user called it and our own ops are not seen."""

    def __init__(self, watch: OpsWatch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if kwargs is None:
            kwargs = {}
        if torch.compiler.is_compiling():  # dynamo traces a compiled function the mode was up for
            return func(*args, **kwargs)
        watch = self.watch
        try:
            known = func in watch._table
        except TypeError:  # an unhashable callable: none of ours
            known = False
        if not known or watch._mode is not self:
            return _through(func)(*args, **kwargs)
        if func in watch._early:
            watch._call(watch._early, func, args, kwargs, None)
        out = _through(func)(*args, **kwargs)
        watch._call(watch._table, func, args, kwargs, out)
        return out


entry(_Mode.__torch_function__)  # a warning torch raises in the call names the user's line


# Watches whose mode may be up: a process forked now (DataLoader workers) takes its copy of the
# mode stack along, and takes ours off it, so that the workers' own ops run as without traindoc.
_pushed: weakref.WeakSet[OpsWatch] = weakref.WeakSet()


def is_traced() -> bool:
    """torch.compile is tracing the code, or a torch.func transform (vmap, grad, jacrev) runs it.
    The tensors seen there are the tracer's or the transform's stand-ins (a batched tensor must
    not leave its vmap): probes measure nothing, patched functions call through."""
    return torch.compiler.is_compiling() or torch._C._functorch.get_dynamic_layer_stack_depth() > 0


def _after_fork_in_child() -> None:
    for watch in list(_pushed):
        watch.close()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _through(func: Any) -> Any:
    """What runs for ``func`` without a mode. torch hands a mode the function as its module
    names it now: after ``F.cross_entropy = my_wrapper`` that is the user's wrapper, which a
    bare run does not call again from inside torch's own function; its ``__wrapped__`` does."""
    code = getattr(func, "__code__", None)
    while code is not None and not code.co_filename.startswith(_TORCH_DIR):
        inner = getattr(func, "__wrapped__", None)
        if inner is None:
            break
        func, code = inner, getattr(inner, "__code__", None)
    return func


def dynamo_compiled() -> bool:
    """Has dynamo compiled anything in this process (a ``torch.compile``'d function, which no
    module hook can recognise before its first call)? Looked up, never imported."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    return bool(counters and counters["stats"].get("unique_graphs", 0))


_marked: set[str] = set()  # traindoc's modules whose code is marked for dynamo
_modules_seen = 0


def shield_from_dynamo() -> None:
    """Once dynamo is loaded (``torch.compile`` imports it; we never do): mark each code object
    of traindoc's to run as it is when it starts a frame. Dynamo compiles each frame that starts
    while a compiled function runs, its eager parts (graph breaks) included: our hooks and
    wrappers called there (an optimizer step's hooks, where dynamo leaves the step to eager)
    would be compiled, their work traced as none and their graphs counted with the user's.
    Only our own frames: what they call of the user's is compiled as in a bare run; and inlined
    into a function dynamo traces, where our hooks stand aside, they are not affected (a frame
    strategy, not a trace rule). Modules of ours imported later are marked at a later call.
    Private torch API: where it is missing, nothing is marked."""
    global _modules_seen
    if len(sys.modules) == _modules_seen or "torch._dynamo.eval_frame" not in sys.modules:
        return
    _modules_seen = len(sys.modules)
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy

        ours = FrameExecStrategy(FrameAction.SKIP, FrameAction.DEFAULT)
        for code in _our_code():
            set_code_exec_strategy(code, ours)
    except Exception:  # another torch: dynamo may compile our frames, as before
        _modules_seen = -1 << 62  # not again


def _our_code() -> Iterable[Any]:
    seen: set[int] = set()
    stack: list[Any] = []
    for name, module in list(sys.modules.items()):
        if (name == "traindoc" or name.startswith("traindoc.")) and name not in _marked:
            _marked.add(name)
            for value in list(vars(module).values()):
                if isinstance(value, type) and value.__module__ == name:
                    stack += [getattr(v, "__func__", getattr(v, "fget", v)) for v in vars(value).values()]
                else:
                    stack.append(value)
    while stack:
        item = stack.pop()
        code = getattr(item, "__code__", item)
        if not hasattr(code, "co_consts") or id(code) in seen or not code.co_filename.startswith(_OUR_DIR):
            continue
        seen.add(id(code))
        yield code
        stack += [c for c in code.co_consts if hasattr(c, "co_consts")]


def is_compiled_module(module: Any) -> bool:
    """A ``torch.compile``'d module (dynamo's wrapper): looked up, never imported."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    optimized = getattr(eval_frame, "OptimizedModule", None)
    return optimized is not None and isinstance(module, optimized)


def torch_function(func: Any) -> Any:
    """The function torch hands a mode for ``func``: torch's own, under any wrapper of the user's
    made with ``functools.wraps``."""
    return inspect.unwrap(func)


def caller(through_init: bool = True) -> Any:
    """The frame that called the op being observed: the innermost frame outside traindoc,
    torch's ``__torch_function__`` dispatch and (``through_init``) the torch.nn.init function
    that made the call."""
    skipped = _SKIPPED if through_init else _SKIPPED[:2]
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(skipped):
        frame = frame.f_back
    return frame


INIT_FILE = os.path.join(_TORCH_DIR, "nn", "init.py")
_SKIPPED = (_OUR_DIR, os.path.join(_TORCH_DIR, "overrides.py"), INIT_FILE)
