"""Where a non-finite value was born: one a guard replaced (``masked-nonfinite``), or a
non-finite loss nothing replaced (``nonfinite``).

Once the masking probe has seen non-finite values replaced (``nan_to_num``, ``torch.where``,
``masked_fill`` on values that require grad), or a sampled step's loss come out NaN or Inf, the
next few sampled steps look for their origin:
the calls of the functions that make NaN or Inf out of finite numbers (``log`` of a negative
or zero, ``sqrt`` of a negative, a division by zero, an ``exp`` that overflows, ``std`` of one
element ...) made in a training forward or loss are candidates. For each, a flag is computed on
the device (no sync): its output holds a non-finite value while every tensor it was given is
finite, i.e. the value was *born* there, not passed on. When a guard then replaces values, the
candidates among their autograd ancestors are read with the guard's own flag in the session's
one batched transfer, and the first born one is the origin: the op, the user's module running
it, and the file and line.

A non-finite value that enters already non-finite (a ``-inf`` attention mask put in by
``masked_fill``, softmax over a fully masked row, NaN in the data) has no birth among these
calls: that is masking by design, and the guard's step gets no origin. (A loss made NaN by
NaN in the data has none either.)

Cost: nothing until a guard is called on values that require grad (the next sampled step is
searched), replaced a non-finite value or a loss came out non-finite; then, on at most
``_BUDGET`` sampled steps of the run, two reductions per candidate call and a bounded walk of the autograd graph
per guard call and per loss. Until then, one flag per sampled step: is the loss finite.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from traindoc.live import measure
from traindoc.live.measure import graph
from traindoc.live.objects import file_line
from traindoc.live.probes._ops import caller, torch_function
from traindoc.live.session import Session

# Functions that turn finite inputs into NaN or Inf, under their torch.* and Tensor names.
_MAKERS = ("log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "div", "divide",
           "true_divide", "pow", "float_power", "exp", "exp2", "expm1", "sinh", "cosh", "tan",
           "acos", "asin", "acosh", "atanh", "arccos", "arcsin", "arccosh", "arctanh", "erfinv",
           "lgamma", "digamma", "logit", "xlogy", "fmod", "remainder", "logdet", "std", "var")
_REFLECTED = ("__rdiv__", "__rtruediv__", "__rpow__")
_BUDGET = 6  # sampled steps of a run that may look for origins
_AFTER = 2  # sampled steps searched after each guard that replaced a non-finite value
_CANDIDATES = 512  # candidate calls remembered per step
_NODES = 4096  # autograd nodes walked per guard call
Candidate = tuple[str, str, str, torch.Tensor]  # op, module, file:line, born flag on the device


def makers() -> list[Any]:
    """The functions as torch hands them to a TorchFunctionMode."""
    found: list[Any] = []
    for name in _MAKERS:
        for owner in (torch, torch.Tensor, torch.special):
            fn = getattr(owner, name, None)
            if fn is not None and torch_function(fn) not in found:
                found.append(torch_function(fn))
    for name in _REFLECTED:
        fn = getattr(torch.Tensor, name, None)
        if fn is not None:
            found.append(torch_function(fn))
    return found


class OriginSearch:
    """The masking probe's helper: arms after a replaced non-finite value, records candidates."""

    def __init__(self, session: Session, listen: Callable[[list[Any], Any], None]) -> None:
        self.s = session
        self._listen = listen  # registers our listener for the maker functions (once, lazily)
        self._listening = False
        self._budget = _BUDGET
        self._left = 0  # sampled steps still to search (armed)
        self._step = -1  # the step whose candidates are held
        # This step's candidates: (autograd node, op, module, file:line, born flag on the device)
        self._cands: list[tuple[Any, str, str, str, torch.Tensor]] = []

    def arm(self, steps: int = _AFTER) -> None:
        """A guard replaced non-finite values: look for their origin on the next sampled steps."""
        if self._budget <= 0:
            return
        if not self._listening:
            self._listening = True
            self._listen(makers(), self.on_op)
        self._left = max(self._left, steps)

    @property
    def spent(self) -> bool:
        """Have the sampled steps a run may search all been searched?"""
        return self._budget <= 0

    def first_guard(self) -> None:
        """The run's first guard call on values that require grad: its values are read back at
        the step's end, too late for the next forward; the rest of this step and the next
        sampled one look at once."""
        if not self._listening:
            self.arm(2)

    def on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """A maker function returned ``out`` in a held window (sampled training step)."""
        if not self._left and self._step != self.s.clock.current_step:
            return
        if (not isinstance(out, torch.Tensor) or not out.requires_grad or out.grad_fn is None
                or not (out.is_floating_point() or out.is_complex()) or not torch.is_grad_enabled()):
            return
        step = self.s.clock.current_step
        if step != self._step:  # a new sampled step: it spends one of the armed ones
            if not self._left or self._budget <= 0:
                return
            self._step, self._cands = step, []
            self._left -= 1
            self._budget -= 1
        if len(self._cands) >= _CANDIDATES:
            return
        inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, (torch.Tensor, float))]
        if any(isinstance(a, float) and not math.isfinite(a) for a in inputs):
            return  # an Inf or NaN given as a number: passed on, not born here
        tensors = [a for a in inputs if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())]
        with torch.no_grad():
            born = (~torch.isfinite(measure.local(out).detach())).any()
            for t in tensors:
                born = born & torch.isfinite(measure.local(t).detach()).all().to(born.device)
        frame = caller()
        where = file_line(frame.f_code.co_filename, frame.f_lineno)
        self._cands.append((out.grad_fn, _op_name(func), self._module(frame), where, born))

    def flags(self, tensors: list[torch.Tensor]) -> tuple[list[Candidate], torch.Tensor]:
        """This step's candidates that ``tensors`` were computed from (in call order), and one
        tensor to read back: whether any of ``tensors`` holds a non-finite value, then each
        candidate's born flag."""
        origins: list[Candidate] = []
        if self._cands and self._step == self.s.clock.current_step:
            seen = {id(node) for node in graph([t.grad_fn for t in tensors], _NODES)}
            origins = [(op, module, where, born) for node, op, module, where, born in self._cands if id(node) in seen]
        with torch.no_grad():
            flag = torch.stack([(~torch.isfinite(measure.local(t).detach())).any() for t in tensors]).any()
            return origins, torch.stack([flag] + [born.to(flag.device) for *_, born in origins]).float()

    def found(self, origins: list[Candidate], vals: list[float]) -> tuple[str, str, str] | None:
        """``flags``' values read back, for non-finite tensors: the search arms for the next
        sampled steps, and the first candidate they were born in is (op, module, file:line)."""
        self.arm()
        return next(((op, module, site) for (op, module, site, _), v in zip(origins, vals[1:]) if v), None)

    def _module(self, frame: Any) -> str:
        """The user's module whose method made the call (a few frames up), by its name in the model."""
        for _ in range(6):
            if frame is None:
                break
            owner = frame.f_locals.get("self")
            if isinstance(owner, torch.nn.Module):
                return self.s.model.module_name(owner)
            frame = frame.f_back
        return ""


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", str(func))
    return {"__rdiv__": "div", "__rtruediv__": "div", "__rpow__": "pow"}.get(name, name)

