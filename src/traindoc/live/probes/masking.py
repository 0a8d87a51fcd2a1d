"""Non-finite values replaced before the loss (``masked-nonfinite`` on per-sample values).

A loss that goes NaN/Inf on some samples (``torch.log`` of a rate head without softplus, a
division by a zero count) is often "fixed" by replacing those values before the mean:
``torch.nan_to_num(per_sample)``, ``torch.where(torch.isfinite(x), x, 0)``,
``x.masked_fill(~torch.isfinite(x), 0)``. The step then trains on the remaining samples and the
NaN never shows in the loss. On sampled steps, while training (grad enabled), these calls are
looked at: when a value they replace or choose from is non-finite and requires grad, the step
gets an ``Activation`` named after the call and its line, which ``masked-nonfinite`` weighs
against the finite value handed to backward(). Outside any model's forward pass that is
``Activation(nan=True, is_output=True, type=REPLACED)``; inside one, ``type=REPLACED_INSIDE``
(a model may replace NaN on purpose, e.g. fully masked attention rows: the detector judges it by
the values' origin). Once a guard replaced something, the next sampled steps look for where the
values were born (probes/nonfinite_origin.py): the first op among their autograd ancestors that
made a non-finite value from finite inputs gives an ``Activation(type=ORIGIN ...)`` before the
guard's own. A sampled step's loss that comes out non-finite, unguarded, arms the same search:
on a later sampled step whose loss is non-finite again, the op among the loss's ancestors where
the NaN or Inf was born gives an ``Activation(type=LOSS_ORIGIN ...)`` (``nonfinite`` names it).

The calls are seen by the op-level mode of sampled steps (probes/_ops.py): torch's functions
stay torch's own. The probe reads a flag on the device (no sync) and takes the caller's file
and line from the frames.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from traindoc.events import REPLACED, Activation, Event
from traindoc.events.steps import LOSS_ORIGIN, ORIGIN, REPLACED_INSIDE
from traindoc.live.objects import file_line
from traindoc.live.probes._ops import caller, torch_function
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.probes.nonfinite_origin import OriginSearch
from traindoc.live.session import Session


class MaskingProbe(Probe):
    name = "masking"
    signals = ("activations",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._on = False  # a sampled step of a level that measures activations
        # Where the replaced values were born (armed once a guard replaced a non-finite value).
        self._origin = OriginSearch(session, lambda funcs, fn: self._ops.listen(self.name, funcs, fn))
        # torch's function -> the tensors whose values it replaces or chooses from
        self._values: dict[Any, Callable[[tuple[Any, ...], dict[str, Any]], list[Any]]] = {
            torch_function(torch.nan_to_num): _first,
            torch_function(torch.Tensor.nan_to_num): _first,
            torch_function(torch.where): _where_values,
            torch_function(torch.Tensor.masked_fill): _first,
        }

    def install(self) -> None:
        self._ops.listen(self.name, self._values, self._seen)
        self._on = self.s.level.activations and self.s.clock.sampled
        self._patcher.on_backward(self.name, before=self._on_loss, sampled_only=True)

    def uninstall(self) -> None:
        self._on = False

    def on_sampling(self, on: bool) -> None:
        self._on = on

    def _seen(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if self._on and torch.is_grad_enabled():
            frame = caller()
            self._check(func.__name__, frame.f_code.co_filename, frame.f_lineno, self._values[func](args, kwargs),
                        inside=self.clock.in_forward)

    def _on_loss(self, loss: Any) -> None:
        """A sampled step's backward: a non-finite loss arms the origin search; on a searched
        step, the op its NaN/Inf was born in (read with the loss's own flag)."""
        if self._origin.spent:  # its few sampled steps are used: nothing more to look for
            self._patcher.drop_backward(self.name)
            return
        if not (self._on and isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad):
            return
        origins, packed = self._origin.flags([loss])
        step, origin = self.s.clock.step, self._origin

        def decode(vals: list[float]) -> Iterable[Event]:
            born = origin.found(origins, vals) if vals[0] else None
            if born is not None:
                op, module, site = born
                yield Activation(step=step, module=module, type=f"{LOSS_ORIGIN} {op} at {site}")

        self.s.defer(packed, decode)

    def _check(self, name: str, fn: str, line: int, tensors: list[Any], inside: bool = False) -> None:
        """A guard inside a model's forward is reported as such (``REPLACED_INSIDE``): a model
        may mask on purpose (fully masked attention rows), which ``masked-nonfinite`` tells
        apart by the values' origin; one in the loss code as the model's output (``REPLACED``)."""
        picked = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad
                  and (t.is_floating_point() or t.is_complex())]
        if not picked:
            return
        self._origin.first_guard()
        origins, packed = self._origin.flags(picked)  # with the born flags of the ops they came from
        if not inside:
            self.s.next_step_begins()
        step = self.s.clock.current_step
        where = file_line(fn, line)
        origin = self._origin

        def decode(vals: list[float]) -> Iterable[Event]:
            if not vals[0]:
                return
            born = origin.found(origins, vals)
            if born is not None:  # first: the detector reads it with the guard
                op, module, site = born
                yield Activation(step=step, module=module, type=f"{ORIGIN} {op} at {site}", nan=True)
            if inside:
                yield Activation(step=step, module=f"{name} at {where}", type=REPLACED_INSIDE)
            else:
                yield Activation(step=step, module=f"{name} at {where}", type=REPLACED,
                                 nan=True, is_output=True)

        self.s.defer(packed, decode)


def _first(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    return [args[0] if args else kwargs.get("input", kwargs.get("self"))]


def _where_values(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """torch.where(cond, x, y): the two value tensors (the one-argument form picks nothing)."""
    return list(args[1:3]) if len(args) >= 3 else [kwargs.get("input"), kwargs.get("other")]
