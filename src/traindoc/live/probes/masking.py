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

The calls are seen by the op-level mode of sampled steps (probes/_ops.py): torch's functions
stay torch's own. The probe reads a flag on the device (no sync) and takes the caller's file
and line from the frames.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from traindoc.events import REPLACED, Activation, Event
from traindoc.live.objects import file_line
from traindoc.live.probes._ops import caller, torch_function
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session


class MaskingProbe(Probe):
    name = "masking"
    signals = ("activations",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._ops = patcher.ops
        self._on = False  # a sampled step of a level that measures activations
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

    def uninstall(self) -> None:
        self._on = False

    def on_sampling(self, on: bool) -> None:
        self._on = on

    def _seen(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if self._on and not self.s.in_model_forward and torch.is_grad_enabled():
            frame = caller()
            self._check(func.__name__, frame.f_code.co_filename, frame.f_lineno, self._values[func](args, kwargs))

    def _check(self, name: str, fn: str, line: int, tensors: list[Any]) -> None:
        picked = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad
                  and (t.is_floating_point() or t.is_complex())]
        if not picked:
            return
        with torch.no_grad():
            flag = torch.stack([(~torch.isfinite(t.detach())).any() for t in picked]).any()
        self.s.next_step_begins()
        step = self.s.clock.current_step
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
