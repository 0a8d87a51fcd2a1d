"""Patching torch safely: remember every original, restore in reverse (leaving alone whatever
the user put in its place since), never let our code raise into the user's.

Nothing a user can see of torch is swapped to observe a value: op-level signals come from a
``TorchFunctionMode`` (``live/ops.py``), optimizer steps from torch's global step hooks, and the
one place with no hook, the start of a backward pass, is wrapped at torch's private entry into
the autograd engine (``torch.autograd._engine_run_backward``), which ``Tensor.backward`` and
``torch.autograd.backward`` both call and TorchScript, ``__torch_function__`` and the user's
own patches never see. docs/live-patches.md lists every remaining patch and why.

The hot path of every step (a backward, an optimizer step) goes through one dispatcher each,
not one wrapper or hook per probe (the step pre hook is registered only for the steps that
measure before their update), and a probe with nothing to do this step is not called at all:
it is registered for sampled steps only, or drops itself once it knows it has no work."""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from traindoc.live.entries import ENGINE_ENTRY
from traindoc.live.probes import _ops
from traindoc.live.probes._clip import ClipEntry
from traindoc.live.probes._ops import OpsWatch, dynamo_compiled, is_traced
from traindoc.live.session import Session
from traindoc.live.warning_site import entry

Hook = tuple[str, Callable[[Any], None]]


class Patcher:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._patched: list[tuple[Any, str, Any, Any]] = []  # owner, name, original, ours
        # Backward callbacks as registered: (probe, before, after, sampled steps only).
        self._backward: list[tuple[str, Callable[[Any], None] | None, Callable[[Any], None] | None, bool]] = []
        # Derived from _backward: (every step, sampled steps), before outermost first, after
        # innermost first. Rebuilt, never mutated, so a dispatch in progress is not disturbed.
        self._before: tuple[list[Hook], list[Hook]] = ([], [])
        self._after: tuple[list[Hook], list[Hook]] = ([], [])
        self._step_pre: list[tuple[str, Callable[[Any, bool], None]]] = []
        self._step_post: list[Hook] = []
        self._pre_handle: Any = None  # torch's handle of the step pre hook, while registered
        self._handles: list[Any] = []
        self._backward_patched = False
        self._local = _Busy()
        # Whether the backward now running keeps its graph (retain_graph=True): several terms
        # of one loss backpropagated in turn, not micro-batches.
        self.retain_graph = False
        # Op-level signals (torch.where, F.cross_entropy ...) through a TorchFunctionMode, on
        # the windows probes hold; the "train" window is the sampled steps'.
        self.ops = OpsWatch(session, self.guard)
        self.clips = ClipEntry(session)  # every gradient clipping, through one dispatcher
        self._train_window = False

    def patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Replace ``owner.name`` by ``make(original)``; ``restore`` puts the original back."""
        orig = getattr(owner, name)
        new = entry(make(orig))
        # An inherited method (Tensor.fill_ is TensorBase's) is deleted again on restore, not
        # left as a copy in the subclass's own namespace.
        own = not isinstance(owner, type) or name in owner.__dict__
        self._patched.append((owner, name, orig if own else _INHERITED, new))
        setattr(owner, name, new)

    def restore(self) -> None:
        self.ops.close()
        self.clips.close()
        self._train_window = False
        self._hook_pre(False)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for owner, name, orig, new in reversed(self._patched):
            # The user may have patched the same name on top of ours since: theirs stays (it
            # still calls ours, which now only calls through).
            if _ours_on_top(_raw(owner, name), new):
                if orig is _INHERITED:
                    delattr(owner, name)
                else:
                    setattr(owner, name, orig)
        self._patched.clear()
        self._backward.clear()
        self._backward_patched = False
        self._before = self._after = ([], [])
        self._step_pre.clear()
        self._step_post.clear()

    # ---- backward ------------------------------------------------------------------------------
    def on_backward(self, probe: str, before: Callable[[Any], None] | None = None,
                    after: Callable[[Any], None] | None = None, sampled_only: bool = False) -> None:
        """Call ``before(loss)`` ahead of every backward the user starts and ``after(loss)``
        once it returned, as if ``probe`` had wrapped ``Tensor.backward`` and
        ``torch.autograd.backward`` itself: probes registered later run their ``before`` first
        and their ``after`` last, like nested wrappers. But there is one wrapper for all probes,
        so a backward pays one extra call, not one per probe. ``loss`` is the tensor backward
        started from (None for several); a backward started inside one (a probe's own) is not
        reported. Each callback is guarded.
        ``sampled_only``: called only for the backward of a sampled step."""
        if not self._backward_patched:
            self._backward_patched = True
            if ENGINE_ENTRY:  # reached by Tensor.backward and torch.autograd.backward alike
                self.patch(torch.autograd, ENGINE_ENTRY, self._dispatch_engine)
            else:  # an older torch: the public function, which Tensor.backward calls
                self.patch(torch.autograd, "backward", self._dispatch_backward)
        entry = (probe, before, after, sampled_only)
        if entry in self._backward:  # registered again while waiting: once is enough
            return
        self._backward.append(entry)
        self._index_backward()

    def drop_backward(self, probe: str) -> None:
        """``probe`` has no more work around backward in this run: stop calling it."""
        self._backward = [b for b in self._backward if b[0] != probe]
        self._index_backward()

    def backward_probes(self, sampled: bool) -> list[str]:
        """The probes called before a backward of a sampled step or of another, in call order."""
        return [probe for probe, _ in self._before[sampled]]

    def _index_backward(self) -> None:
        regs = self._backward
        before_all = [(p, b) for p, b, _, s in reversed(regs) if b is not None and not s]
        before_sampled = [(p, b) for p, b, _, s in reversed(regs) if b is not None]
        after_all = [(p, a) for p, _, a, s in regs if a is not None and not s]
        after_sampled = [(p, a) for p, _, a, s in regs if a is not None]
        self._before = (before_all, before_sampled)
        self._after = (after_all, after_sampled)

    def _dispatch_backward(self, orig: Any) -> Any:
        local, session = self._local, self.session
        patcher, Tensor = self, torch.Tensor

        @functools.wraps(orig)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if local.busy or is_traced():
                return orig(tensors, *args, **kwargs)
            _ops.shield_from_dynamo()
            if patcher.ops.active:  # the forward is over: backward and the step run without the mode
                # In a step handed a closure, the first forward only is watched op by op, not
                # the re-evaluations of its line search (the same batch, other weights).
                patcher.ops.pause(rearm=session.clock.closure is None)
            loss = tensors if isinstance(tensors, Tensor) else (
                tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1
                and isinstance(tensors[0], Tensor) else None)
            if len(args) > 2:  # Tensor.backward's call: (gradient, retain_graph, create_graph)
                retain, create = args[1], args[2]
            else:
                retain = args[1] if len(args) > 1 else kwargs.get("retain_graph")
                create = kwargs.get("create_graph")
            patcher.retain_graph = bool(create if retain is None else retain)  # torch's default
            # The step this backward belongs to is sampled or not from its first callback on
            # (the round that closes in it was decided at its optimizer step), unless a
            # hand-written update may end the round in the first callback: then all are called
            # (a sampled-only callback checks ``session.clock.measuring`` itself).
            sampled = session.clock.measuring or (
                not session.manual.off and session.clock.micro > 0 and not session.clock.round_done)
            failed = session.failed
            for probe, fn in patcher._before[sampled]:  # call_each, written out: every step
                if probe not in failed:
                    try:
                        fn(loss)
                    except Exception as exc:  # never let traindoc break the user's training
                        session.fail(probe, exc)
            # Counted once the before callbacks ran: a round they end (a hand-written update
            # found at this backward) ends before it.
            session.clock.backwards += 1
            local.busy = True
            try:
                out = orig(tensors, *args, **kwargs)
            finally:
                local.busy = False
            after = patcher._after[sampled]
            if after:
                call_each(after, session, loss)
            return out

        return backward

    def _dispatch_engine(self, orig: Any) -> Any:
        """torch's entry into the autograd engine: ``(tensors, grad_tensors, retain_graph,
        create_graph, inputs, allow_unreachable=, accumulate_grad=)``, as torch.autograd.backward
        calls it (retain_graph already defaulted to create_graph); torch.autograd.grad calls it
        with accumulate_grad=False and is not a backward of the step."""
        backward = self._dispatch_backward(orig)

        @functools.wraps(orig)
        def _engine_run_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("accumulate_grad", True):
                return orig(tensors, *args, **kwargs)
            return backward(tensors, *args, **kwargs)

        return _engine_run_backward

    # ---- optimizer steps -----------------------------------------------------------------------
    def on_step(self, probe: str, pre: Callable[[Any, bool], None] | None = None,
                post: Callable[[Any], None] | None = None) -> None:
        """Call ``post(optimizer)`` after every optimizer step and ``pre(optimizer, closure)``
        before the steps that need it (``closure``: the step was handed one, as LBFGS's is):
        every step until the first one took effect, then the steps of sampled rounds only
        (what a post callback must do at every step it does itself). Callbacks run in the
        order probes registered, through one global pre hook and one post hook for all
        probes; each is guarded; inside torch.compile tracing none runs."""
        if pre is not None:
            self._step_pre.append((probe, pre))
            self._hook_pre(True)
        if post is not None:
            if not self._step_post:
                self._handles.append(register_optimizer_step_post_hook(self._dispatch_post))
            self._step_post.append((probe, post))

    def _dispatch_pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        if is_traced():
            return
        self.ops.settle()  # the step and its measurements run without the mode of the backward
        slices = self.session.framework_step
        if slices is not None and id(opt) in slices:  # ZeRO's next group: the same step
            self.guard("optimizer", self.session.on_slice, opt, True)
            return
        # torch's step hooks get the optimizer itself as args[0]
        closure = (args[1] if len(args) > 1 else kwargs.get("closure")) is not None
        clock = self.session.clock
        clock.closure = (id(opt), clock.backwards) if closure else None
        call_each(self._step_pre, self.session, opt, closure)  # sampled rounds only: off the hot path

    def _dispatch_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        if is_traced():
            return
        session = self.session
        slices = session.framework_step
        if slices is not None:  # inside a framework's step: its first call of opt.step() is the step
            if id(opt) in slices:
                self.guard("optimizer", session.on_slice, opt, False)
                self.step_ended()
                return
            slices.add(id(opt))
        failed = session.failed
        for probe, fn in self._step_post:  # call_each, written out: every step
            if probe not in failed:
                try:
                    fn(opt)
                except Exception as exc:  # never let traindoc break the user's training
                    session.fail(probe, exc)
        self.step_ended()

    def step_ended(self) -> None:
        """An optimizer step ended (its post hook ran, or a GradScaler skipped it and no hook
        ran): the pre hook goes on for the steps of a sampled round (this one, a later
        optimizer of it, or the next) and stays on until the first step took effect, so that
        an unsampled step calls nothing before its update."""
        session = self.session
        self.ops.settle()
        if session.clock.closure is not None:
            session.clock.closure = None
            self.ops.rearm()
        if not session.compiled and dynamo_compiled():  # a compiled function ran this step
            self.ops.close()
            session.mark_compiled()
        if session.clock.measuring != self._train_window:
            self.sync_ops()
        wanted = bool(self._step_pre) and (session.clock.measuring or session.clock.sampled or not session.clock.trained
                                           or bool(session.clock.first_step_listeners))
        if wanted != (self._pre_handle is not None):
            self._hook_pre(wanted)

    def sync_ops(self) -> None:
        """The op-level window of training follows the session's sampled steps."""
        self._train_window = self.session.clock.measuring
        if self._train_window:
            self.ops.hold("train")
        else:
            self.ops.release("train")

    def _hook_pre(self, on: bool) -> None:
        if on and self._pre_handle is None:
            self._pre_handle = register_optimizer_step_pre_hook(self._dispatch_pre)
        elif not on and self._pre_handle is not None:
            self._pre_handle.remove()
            self._pre_handle = None

    def guard(self, probe: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run our part of a hook. An exception disables ``probe`` (reported once by the
        session) and never reaches the user's script; inside torch.compile tracing, do nothing."""
        if probe in self.session.failed or is_traced():
            return
        try:
            fn(*args)
        except Exception as exc:  # never let traindoc break the user's training
            self.session.fail(probe, exc)


def _raw(owner: Any, name: str) -> Any:
    """``owner.name`` as stored (a class's raw ``__dict__`` entry: a classmethod unbound)."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in klass.__dict__:
                return klass.__dict__[name]
        return None
    return getattr(owner, name, None)


_INHERITED = object()  # restore: delete the attribute (the class inherited it)


def _ours_on_top(current: Any, new: Any) -> bool:
    """Is ``current`` our wrapper ``new``, or another of traindoc's own wrappers put on top of it
    since (a part of traindoc that patches by itself and puts back only its own)? A wrapper
    of the user's is left in place."""
    code = getattr(current, "__code__", None)
    return current is new or (code is not None and code.co_filename.startswith(_PACKAGE))


_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep



class _Busy(threading.local):
    """Per thread: is a backward of the user's running now (one started inside it is ours)?"""

    busy = False


def call_each(hooks: list[tuple[str, Callable[..., None]]], session: Session, *args: Any) -> None:
    """Call each probe's callback with ``args``; one that raises disables its probe (reported
    once by the session) and never reaches the user's script."""
    failed = session.failed
    for probe, fn in hooks:
        if probe not in failed:
            try:
                fn(*args)
            except Exception as exc:  # never let traindoc break the user's training
                session.fail(probe, exc)
