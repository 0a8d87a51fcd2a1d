"""Autocast coverage, the AMP probe's part on sampled steps: which matmul-heavy modules ran
in float32 inside a mixed-precision step, and why.

Forward hooks (sampled steps only) record the output dtype of matmul-heavy modules and the
autocast state they ran under; the graph of the step's first backward shows the Functions whose
forward is ``custom_fwd(cast_inputs=torch.float32)``. One ``AutocastCheck`` per sampled step of a
mixed-precision run (autocast on, or a GradScaler that scaled a loss in the step).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.nn as nn

from traindoc.events import AutocastCheck
from traindoc.live.probes._patch import is_traced
from traindoc.live.probes.base import FirstCalls

if TYPE_CHECKING:
    from traindoc.live.session import Session

# Modules whose work is matmuls that autocast runs in bf16/fp16 (RNNs are left out: CPU
# autocast does not cover all of them).
MATMUL = (nn.Linear, nn.modules.conv._ConvNd, nn.MultiheadAttention)
AUTOCAST_DEVICES = ("cuda", "cpu", "xpu", "mps")


class AutocastCoverage:
    def __init__(self, session: Session, guard: Callable[..., None]) -> None:
        self._s = session
        self._guard = guard
        self._scaled: set[int] = set()  # steps in which a GradScaler scaled a loss
        self._fwd: list[Any] = []
        self._calls = FirstCalls()  # the calls of each module a sampled step measures
        self._rows: list[tuple[int, str, int, bool, str, str]] = []
        self._seen: dict[int, set[str]] = {}
        self._walked: set[int] = set()  # the steps whose graph was read (micro-batches share their Functions)
        self._main = threading.main_thread().ident
        self._devices = _autocast_devices()

    def scaled(self, step: int) -> None:
        """A GradScaler scaled a loss in ``step``: a mixed-precision step."""
        self._scaled.add(step)

    def close(self) -> None:
        self._set_forward_hooks(False)
        self._guard(self._emit_autocast, 1 << 62)  # the last sampled step's check

    def on_sampling(self, on: bool) -> None:
        if on != bool(self._fwd):  # every step: only a change costs anything
            self._guard(self._set_forward_hooks, on)

    def _set_forward_hooks(self, on: bool) -> None:
        if on and not self._fwd and not self._s.compiled:
            from torch.nn.modules.module import register_module_forward_hook

            self._fwd = [register_module_forward_hook(self._post)]
        elif not on and self._fwd:
            for h in self._fwd:
                h.remove()
            self._fwd = []

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if is_traced() or not torch.is_grad_enabled() or not self._calls.take(module):
            return
        self._guard(self._record, module, output)

    def _record(self, module: Any, output: Any) -> None:
        active = [d for d in self._devices if torch.is_autocast_enabled(d)]
        step = self._s.clock.current_step
        if active:
            self._seen.setdefault(step, set()).update(
                f"{d}:{str(torch.get_autocast_dtype(d)).removeprefix('torch.')}" for d in active)
        if not isinstance(module, MATMUL):
            return
        out = output[0] if isinstance(output, (tuple, list)) and output else output
        weight = next(module.parameters(), None)
        if not isinstance(out, torch.Tensor) or weight is None or not out.is_floating_point():
            return
        fp32 = out.dtype == torch.float32 and weight.dtype == torch.float32
        device = out.device.type
        if not fp32:
            reason = ""
        elif threading.get_ident() != self._main and not active:
            reason = "thread"
        elif device in active:
            reason = "ignored"
        elif active:
            reason = "device"
        else:
            reason = "outside"
        name = self._s.model.module_name(module)
        numel = sum(p.numel() for p in module.parameters())
        self._rows.append((step, name, numel, fp32, device, reason))

    def on_backward(self, loss: Any) -> None:
        """The first backward of a sampled mixed-precision step: the Functions in its graph
        whose forward is ``custom_fwd(cast_inputs=torch.float32)``, with the parameters they
        took. Read from the graph (each node keeps its ``_forward_cls``), so
        ``autograd.Function.apply`` stays torch's own (a C method since torch 2.14)."""
        step = self._s.clock.current_step
        autocast = self._seen.get(step)
        if not self._fwd or loss is None or not autocast or step in self._walked:
            return
        self._walked.add(step)
        on = {a.split(":")[0] for a in autocast}
        for cls, params in _custom_functions(loss.grad_fn):
            device = _casts_to_fp32(cls)
            if device in on and params:
                name = f"{cls.__name__}({self._s.model.param_name(params[0])})"
                self._rows.append((step, name, sum(p.numel() for p in params), True, params[0].device.type,
                                   "custom_fwd"))

    def on_sampled_round_end(self, step: int) -> None:
        self._calls.clear()
        self._walked.clear()
        if self._rows or self._scaled:  # a sampled round: its forward's autocast rows
            self._guard(self._emit_autocast, step)

    def _emit_autocast(self, upto: int) -> None:
        rows = [r for r in self._rows if r[0] <= upto]
        if not rows:
            if self._scaled and min(self._scaled) <= upto:
                self._scaled = {k for k in self._scaled if k > upto}
            return
        self._rows = [r for r in self._rows if r[0] > upto]
        for step in sorted({r[0] for r in rows}):
            seen = self._seen.pop(step, set())
            scaled = step in self._scaled
            if not seen and not scaled:
                continue  # not a mixed-precision step: nothing to check
            mine = [r for r in rows if r[0] == step]
            names: dict[str, tuple[int, str, str]] = {}
            for _, name, numel, fp32, device, reason in mine:
                if fp32:
                    names.setdefault(name, (numel, device, reason))
            reasons: Counter[str] = Counter()
            devices: Counter[str] = Counter()
            for numel, device, reason in names.values():
                reasons[reason] += numel
                devices[device] += numel
            unique = {r[1]: r[2] for r in mine}
            self._s.emit(AutocastCheck(
                step=step, autocast=tuple(sorted(seen)), scaler=scaled,
                modules=len(unique), numel=sum(unique.values()), fp32=tuple(names)[:50],
                fp32_numel=sum(n for n, _, _ in names.values()),
                device=devices.most_common(1)[0][0] if devices else "",
                reason=reasons.most_common(1)[0][0] if reasons else "",
            ))
        for old in [k for k in self._seen if k <= upto]:
            del self._seen[old]
        self._scaled = {k for k in self._scaled if k > upto}


_FP32_FUNCTIONS: dict[Any, str] = {}  # Function class -> device of its float32 custom_fwd, or ""
_MAX_NODES = 100_000  # a graph read on a sampled step stops here (an unrolled RNN's can be huge)


def _custom_functions(root: Any) -> list[tuple[Any, list[Any]]]:
    """The custom autograd Functions in the graph below ``root``, each with the leaf tensors
    it took directly (its inputs that are parameters, not activations)."""
    found: list[tuple[Any, list[Any]]] = []
    seen: set[Any] = set()
    stack = [root]
    while stack and len(seen) < _MAX_NODES:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        nexts = node.next_functions
        cls = getattr(node, "_forward_cls", None)
        if cls is not None:
            found.append((cls, [fn.variable for fn, _ in nexts if hasattr(fn, "variable")]))
        stack.extend(fn for fn, _ in nexts)
    return found


def _casts_to_fp32(cls: Any) -> str:
    """The autocast device of ``cls.forward`` when it is ``custom_fwd(cast_inputs=float32)``
    (read from the decorator's closure), else ""."""
    found = _FP32_FUNCTIONS.get(cls)
    if found is None:
        fwd = cls.__dict__.get("forward")
        fwd = getattr(fwd, "__func__", fwd)
        cells = dict(zip(getattr(getattr(fwd, "__code__", None), "co_freevars", ()), getattr(fwd, "__closure__", None) or ()))
        try:
            cast = cells["cast_inputs"].cell_contents if "cast_inputs" in cells else None
            device = cells["device_type"].cell_contents if "device_type" in cells else ""
        except ValueError:  # an empty cell
            cast, device = None, ""
        found = device if cast is torch.float32 and isinstance(device, str) else ""
        if len(_FP32_FUNCTIONS) < 256:
            _FP32_FUNCTIONS[cls] = found
    return found


def _autocast_devices() -> tuple[str, ...]:
    out = []
    for d in AUTOCAST_DEVICES:
        try:
            torch.is_autocast_enabled(d)
            out.append(d)
        except (RuntimeError, TypeError):
            pass
    return tuple(out)


__all__ = ["AUTOCAST_DEVICES", "MATMUL", "AutocastCoverage"]
