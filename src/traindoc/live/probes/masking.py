"""Non-finite values replaced before the loss (``masked-nonfinite`` on per-sample values).

A loss that goes NaN/Inf on some samples (``torch.log`` of a rate head without softplus, a
division by a zero count) is often "fixed" by replacing those values before the mean:
``torch.nan_to_num(per_sample)``, ``torch.where(torch.isfinite(x), x, 0)``,
``x.masked_fill(~torch.isfinite(x), 0)``. The step then trains on the remaining samples and the
NaN never shows in the loss. On sampled steps, while training (grad enabled) and outside any
model's forward pass (a model may handle NaN on purpose, e.g. fully masked attention rows),
these calls are looked at: when a value they replace or choose from is non-finite and requires
grad, the step gets an ``Activation(nan=True, is_output=True)`` named after the call and its
line, which ``masked-nonfinite`` weighs against the finite value handed to backward().

The wrappers are installed once and look only on sampled steps: other steps pay one flag test
per call. (Putting ``Tensor.masked_fill`` in place and back at every sampled step would modify
the ``torch.Tensor`` class thousands of times a run; CPython 3.13 stops caching attribute
lookups on a class after 1000 changes, which would slow every tensor method call of the run.)
They read a flag on the device (no sync) and take the caller's file and line from one frame.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Iterable

import torch

from traindoc.events import REPLACED, Activation, Event
from traindoc.live.objects import file_line
from traindoc.live.probes._patch import Patcher, is_compiling
from traindoc.live.session import Session


class MaskingProbe:
    name = "masking"

    def __init__(self, session: Session, patcher: Patcher) -> None:
        self.s = session
        self._patch = patcher.patch
        self._guard = patcher.guard
        self._on = False  # a sampled step of a level that measures activations
        self._targets: list[tuple[Any, str, Callable[[tuple[Any, ...], dict[str, Any]], list[Any]]]] = [
            (torch, "nan_to_num", _first),
            (torch.Tensor, "nan_to_num", _first),
            (torch, "where", _where_values),
            (torch.Tensor, "masked_fill", _first),
        ]

    def install(self) -> None:
        for owner, name, values in self._targets:
            self._patch(owner, name, functools.partial(self._wrap, name=name, values=values))
        self.s.sampling_listeners.append(self._toggle)
        self._on = self.s.level.activations and self.s.sampled

    def uninstall(self) -> None:
        if self._toggle in self.s.sampling_listeners:
            self.s.sampling_listeners.remove(self._toggle)
        self._on = False

    def _toggle(self, on: bool) -> None:
        self._on = on

    def _wrap(self, orig: Any, name: str, values: Callable[[tuple[Any, ...], dict[str, Any]], list[Any]]) -> Any:
        probe = self

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            if probe._on and not probe.s.in_model_forward and torch.is_grad_enabled() and not is_compiling():
                frame = sys._getframe(1)  # the caller's file and line: one frame, no walk
                probe._guard(probe.name, probe._check, name, frame.f_code.co_filename, frame.f_lineno,
                             values(args, kwargs))
            return out

        return wrapper

    def _check(self, name: str, fn: str, line: int, tensors: list[Any]) -> None:
        picked = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad
                  and (t.is_floating_point() or t.is_complex())]
        if not picked:
            return
        with torch.no_grad():
            flag = torch.stack([(~torch.isfinite(t.detach())).any() for t in picked]).any()
        self.s.next_step_begins()
        step = self.s.current_step
        where = file_line(fn, line)

        def decode(vals: list[float]) -> Iterable[Event]:
            if vals[0]:
                yield Activation(step=step, module=f"{name} at {where}", type=REPLACED,
                                 nan=True, is_output=True)

        self.s.defer(flag.reshape(1), decode)


def _first(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    return [args[0] if args else kwargs.get("input", kwargs.get("self"))]


def _where_values(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """torch.where(cond, x, y): the two value tensors (the one-argument form picks nothing)."""
    return list(args[1:3]) if len(args) >= 3 else [kwargs.get("input"), kwargs.get("other")]
