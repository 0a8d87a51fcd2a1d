"""The one batched transfer: measurements wait on their device, then are read back together.

Tensors measured during a step stay on their device in ``pending``; at the end of each
*sampled* step they are concatenated and read back with one ``.tolist()`` per device (the only
GPU sync traindoc adds), decoded into events in stream order, with the step clock's lifecycle
markers between them: each round's end is emitted after the round's own measurements, with the
round's loss (the sum of its backward values) and its gradient norm.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import torch

from traindoc.events import (
    SKIPPED_BY_SCRIPT, STEPPED, Backward, Clip, Event, Scalar, StepBegin, StepEnd,
)
from traindoc.live import measure
from traindoc.live.clock import Marker, Outcome

# A deferred measurement in the pending list: (tensor, decoder, arguments); at the flush,
# ``decoder(values, *arguments)`` makes its events. The session's own measurements of every
# step (the loss, the clip norm) pass arguments rather than make a closure at every step.
Deferred = tuple[torch.Tensor, Callable[..., Iterable[Event]], tuple[Any, ...]]


class Stream:
    def __init__(self, emit: Callable[[Event], None], fail: Callable[[str, BaseException], None],
                 failed: dict[str, str], *, routine: bool) -> None:
        self._emit = emit
        self._fail = fail
        self._failed = failed
        self._routine = routine  # StepEnd of a step that took effect: only when something reads it
        # In stream order: measurements to read back, round ends, and events that must not
        # overtake the measurements before them (never rebound: the clock writes to it too).
        self.pending: list[Deferred | Marker | Event] = []
        self.taken: dict[int, int] = {}  # the clock's steps taken per optimizer (shared, read only)
        self.loss_sum: dict[int, float] = {}  # step -> sum of its decoded backward values
        self.grad_sq: dict[int, float] = {}  # step -> sum of squared gradient norms measured
        self._clipped: set[int] = set()  # steps whose gradient norm a clipping reports

    def defer(self, tensor: torch.Tensor, decode: Callable[..., Iterable[Event]], *args: Any) -> None:
        """Keep ``tensor`` on its device until the next flush, then call ``decode`` with its
        values (a list of floats) and ``args`` to make events. Probes use this instead of
        ``.item()``."""
        self.pending.append((measure.local(tensor), decode, args))  # a DTensor: never a collective

    def backward(self, value: torch.Tensor, step: int, micro: int, constant: bool, where: str) -> None:
        """The value a backward of ``step`` started from (summed into the step's loss)."""
        self.defer(value, _decode_backward, self.loss_sum, step, micro, constant, where)

    def clip(self, norm: torch.Tensor, step: int, max_norm: float, where: str, via: str) -> None:
        """A clipping of ``step``: its norm is the step's gradient norm."""
        self._clipped.add(step)
        self.defer(norm, _decode_clip, step, max_norm, where, via)

    def clip_pending(self, step: int) -> None:
        """A clipping of ``step`` will be reported once the step took it: the gradients measured
        in the step are clipped ones, so they give no gradient norm of their own."""
        self._clipped.add(step)

    def flush(self) -> None:
        if not self.pending:
            return
        pending = self.pending[:]
        self.pending.clear()
        read = iter(measure.read_back([e[0] for e in pending if isinstance(e, tuple) and e[0] is not None]))
        emit = self._emit
        for entry in pending:
            if isinstance(entry, tuple):
                if entry[0] is None:  # a lifecycle marker
                    if entry[2] is None:
                        emit(StepBegin(step=entry[1]))
                    else:
                        self._end_round(entry[1], entry[2])
                    continue
                vals = next(read)
                if "decode" in self._failed:
                    continue
                try:  # a probe's decoder must not stop the stream (the lifecycle is in it)
                    events = list(entry[1](vals, *entry[2]))
                except Exception as exc:  # never let traindoc break the user's training
                    self._fail("decode", exc)
                    continue
                for event in events:
                    emit(event)
            else:
                emit(entry)

    def _end_round(self, step: int, outcomes: list[Outcome]) -> None:
        """The round's loss and gradient norm, then how each optimizer's step ended."""
        loss = self.loss_sum.pop(step, None)
        # A round the script dropped on purpose (backward, then zero_grad and no step, while
        # it steps its optimizer elsewhere) trained on nothing: its loss is not the training
        # loss. Its Backward events still carry the values.
        dropped = self.taken and all(o == SKIPPED_BY_SCRIPT for _, o, _ in outcomes)
        if loss is not None and not dropped:
            self._emit(Scalar(step=step, name="loss", value=loss))
        grad_sq = self.grad_sq.pop(step, None)
        clipped = step in self._clipped
        self._clipped.discard(step)
        if self._clipped:  # a clip reported after its round was read back (rare): forget it too
            self._clipped = {s for s in self._clipped if s > step}
        if not clipped and grad_sq is not None:
            self._emit(Scalar(step=step, name="grad_norm", value=math.sqrt(grad_sq)))
        for index, outcome, taken in outcomes:
            if outcome != STEPPED or self._routine:
                self._emit(StepEnd(step=step, optimizer=index, outcome=outcome, taken=taken))


def _decode_backward(vals: list[float], sums: dict[int, float], step: int, micro: int, constant: bool,
                     where: str) -> tuple[Event, ...]:
    sums[step] = sums.get(step, 0.0) + vals[0]  # the step's loss, emitted at its end
    return (Backward(step=step, value=vals[0], constant=constant, micro=micro, where=where),)


def _decode_clip(vals: list[float], step: int, max_norm: float, where: str, via: str) -> tuple[Event, ...]:
    return (Clip(step=step, norm=vals[0], max_norm=float(max_norm), where=where, via=via),
            Scalar(step=step, name="grad_norm", value=vals[0]))


__all__ = ["Deferred", "Stream"]
