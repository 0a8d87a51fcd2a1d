"""Patching torch safely: remember every original, restore in reverse, never let our code
raise into the user's."""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

import torch

from traindoc.live.session import Session

is_compiling = torch.compiler.is_compiling


class Patcher:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._patched: list[tuple[Any, str, Any]] = []
        self._before: list[tuple[str, Callable[[Any], None]]] = []  # backward, outermost first
        self._after: list[tuple[str, Callable[[Any], None]]] = []  # backward, innermost first
        self._local = threading.local()
        # Whether the backward now running keeps its graph (retain_graph=True): several terms
        # of one loss backpropagated in turn, not micro-batches.
        self.retain_graph = False

    def patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Replace ``owner.name`` by ``make(original)``; ``restore`` puts the original back."""
        orig = getattr(owner, name)
        self._patched.append((owner, name, orig))
        setattr(owner, name, make(orig))

    def patch_descriptor(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Like ``patch`` for an attribute whose descriptor matters (a classmethod): the raw
        ``owner.__dict__`` entry is handed to ``make`` and put back by ``restore``."""
        orig = owner.__dict__[name]
        self._patched.append((owner, name, orig))
        setattr(owner, name, make(orig))

    def replace(self, owner: Any, name: str, new: Any) -> None:
        """Replace ``owner.name`` by ``new`` (one wrapper shared by several owners: the same
        function under two import paths); ``restore`` puts the original back."""
        self.patch(owner, name, lambda _orig: new)

    def restore(self) -> None:
        for owner, name, orig in reversed(self._patched):
            setattr(owner, name, orig)
        self._patched.clear()
        self._before.clear()
        self._after.clear()

    def on_backward(self, probe: str, before: Callable[[Any], None] | None = None,
                    after: Callable[[Any], None] | None = None) -> None:
        """Call ``before(loss)`` ahead of every backward the user starts and ``after(loss)``
        once it returned, as if ``probe`` had wrapped ``Tensor.backward`` and
        ``torch.autograd.backward`` itself: probes registered later run their ``before`` first
        and their ``after`` last, like nested wrappers. But there is one wrapper for all probes,
        so a backward pays one extra call, not one per probe. ``loss`` is the tensor backward
        started from (None for several); the ``torch.autograd.backward`` that
        ``Tensor.backward`` makes inside is not reported again. Each callback is guarded."""
        if not self._before and not self._after:
            self.patch(torch.Tensor, "backward", self._dispatch_backward)
            self.patch(torch.autograd, "backward", self._dispatch_backward)
        if before is not None:
            self._before.insert(0, (probe, before))
        if after is not None:
            self._after.append((probe, after))

    def _dispatch_backward(self, orig: Any) -> Any:
        local, before, after = self._local, self._before, self._after
        session = self.session

        def run(hooks: list[tuple[str, Callable[[Any], None]]], loss: Any) -> None:
            failed = session.failed
            for probe, fn in hooks:
                if probe not in failed:
                    try:
                        fn(loss)
                    except Exception as exc:  # never let traindoc break the user's training
                        session.fail(probe, exc)

        @functools.wraps(orig)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(local, "busy", False) or is_compiling():
                return orig(tensors, *args, **kwargs)
            loss = tensors if isinstance(tensors, torch.Tensor) else (
                tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1
                and isinstance(tensors[0], torch.Tensor) else None)
            retain = kwargs.get("retain_graph", args[1] if len(args) > 1 else None)
            self.retain_graph = bool(retain) if retain is not None else bool(kwargs.get("create_graph"))
            run(before, loss)
            local.busy = True
            try:
                out = orig(tensors, *args, **kwargs)
            finally:
                local.busy = False
            run(after, loss)
            return out

        return backward

    def guard(self, probe: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run our part of a hook. An exception disables ``probe`` (reported once by the
        session) and never reaches the user's script; inside torch.compile tracing, do nothing."""
        if probe in self.session.failed or is_compiling():
            return
        try:
            fn(*args)
        except Exception as exc:  # never let traindoc break the user's training
            self.session.fail(probe, exc)
