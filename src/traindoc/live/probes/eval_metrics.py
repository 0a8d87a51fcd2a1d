"""Evaluation metrics of a script that only prints: derived from the loss calls of its
evaluation, and read from the lines it prints.

**From the loss.** ``F.cross_entropy``, ``F.nll_loss``, ``F.binary_cross_entropy_with_logits``
and ``F.binary_cross_entropy`` (``nn.CrossEntropyLoss``, ``nn.NLLLoss``, ``nn.BCEWithLogitsLoss``
and ``nn.BCELoss`` call them) are seen by the op-level mode (probes/_ops.py), which is up in an
evaluation window: a ``no_grad``/``inference_mode`` region after the round's optimizer step
(the eval probe holds it; once 8 regions in a row entered from one line reached no listener,
an agent acting a step per region or a target computed in each step, that line's regions run
without it but every 64th) or while the trained model is in eval mode (this probe holds it). A call belongs to an evaluation when it
comes after the round's optimizer step and runs under ``no_grad``/``inference_mode``, or with
gradients on while the trained model is in eval mode (its last mode switch was ``eval()``). A
training step pays nothing. Of an
evaluation call the probe keeps, on the device: for a class loss (logits ``[N, C, ...]``) the
argmax predictions equal to the targets and the targets counted (``ignore_index`` left out;
probability targets by their argmax), and C; for a binary loss the scores above 0.5 (logit > 0
for the ``with_logits`` form), the targets >= 0.5, the count and the highest score; and for
either, the call's loss summed over what it counted (its mean times the count, its sum). The
sums of one evaluation phase (until the next training backward) are read in the session's
batched transfer and published at the step the evaluation ran: ``val_classes`` and
``val_acc``, ``val_pos_rate``, ``val_base_rate`` and ``val_max_score``, and ``val_loss`` (the
class losses' mean, else the binary ones'; none when a class ``weight`` or ``pos_weight``
makes the mean another average). A value the script logs or prints itself under the same
signal stands alone. With gradients on, a call followed by a backward
before any other evaluation call or ``model.train()``, or by an optimizer step (a loss the
model returns as a float in eval mode gets no backward), was training (a model trained in eval
mode): it is dropped and the gradient-on path waits for the next ``model.eval()``.

**From stdout**: ``printed.py`` reads the metrics a script prints.
"""

from __future__ import annotations

import functools
import math
import sys
import weakref
from typing import Any, Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F

from traindoc.events import Event
from traindoc.live.probes._ops import torch_function
from traindoc.live.probes._patch import Patcher, is_traced
from traindoc.live.probes.base import Probe
from traindoc.live.probes.eval_parts import QuietLines, TrainedModels
from traindoc.live.probes.publisher import Publisher, publisher
from traindoc.live.probes.printed import Printed
from traindoc.live.session import Session

_CLASS_FNS = ("cross_entropy", "nll_loss")
_BINARY_FNS = ("binary_cross_entropy_with_logits", "binary_cross_entropy")
_FOLD = 64  # per-call vectors kept before they are summed (on the device)


class _Phase:
    """One evaluation: the sums of its class and binary loss calls, still on the device."""

    __slots__ = ("step", "classes", "cls", "bin")

    def __init__(self, step: int) -> None:
        self.step = step
        self.classes = 0
        self.cls: list[torch.Tensor] = []  # [correct, counted, loss summed] per call (or folded)
        self.bin: list[torch.Tensor] = []  # [above 0.5, positive targets, count, loss summed, top score]


class EvalMetricsProbe(Probe):
    name = "eval_metrics"
    signals = ("metrics",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self.pub = publisher(session)
        self._phase: _Phase | None = None
        # A gradient-on call in eval mode waits here until the next one (or model.train())
        # says it was evaluation, or a backward says it was training.
        self._pending: tuple[str, torch.Tensor, int, int] | None = None
        self._eval_model: weakref.ref[Any] | None = None  # the trained model, put in eval mode
        self._mode_depth = 0
        self._trained = TrainedModels()
        # The lines that put the trained model in eval mode for windows whose ops reach no
        # listener (an RL agent acting in eval mode every step): their windows go without the mode
        self._quiet = QuietLines()
        self._drops = 0  # gradient-on calls that turned out to be training
        self.evaluated = False  # an evaluation loss call since the last training backward
        self.printed = Printed(session, self.pub, self.in_evaluation, patcher.guard, self._wake)

    # ---- install / uninstall -----------------------------------------------------------------
    def install(self) -> None:
        ops = self._patcher.ops
        ops.listen(self.name, [torch_function(getattr(F, fn)) for fn in _CLASS_FNS], self._seen)
        ops.listen(self.name, [torch_function(getattr(F, fn)) for fn in _BINARY_FNS], self._seen)
        self._patcher.patch(nn.Module, "train", self._wrap_train)
        self._guard("stdout", self.printed.install)

    def uninstall(self) -> None:
        self._patcher.ops.release("eval-mode")
        self.s.clock.unlisten_round(self._on_round)
        try:  # always put the real stdout back, even when reading it was disabled
            self.printed.uninstall()
        except Exception as exc:  # never let traindoc break the user's run
            self.s.fail("stdout", exc)
        self._guard(self.name, self._end_phase)

    # ---- loss calls, seen by the op-level mode ---------------------------------------------------
    def _seen(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if (torch.is_grad_enabled() and self._eval_model is None) or not self.s.clock.round_done or len(args) < 2:
            return
        name = func.__name__
        kind = "cls" if name in _CLASS_FNS else "bin"
        # torch hands the mode the tensors positionally and the options as keywords
        self._on_loss(kind, name.endswith("with_logits"), args[0], args[1], args[2:], kwargs, out)

    def _wrap_train(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def train(module: Any, mode: bool = True) -> Any:
            if probe._mode_depth:  # the children of the module switched by the user
                return orig(module, mode)
            probe._mode_depth += 1
            try:
                out = orig(module, mode)
            finally:
                probe._mode_depth -= 1
            probe._guard(probe.name, probe._on_mode, module, mode, sys._getframe(1))
            return out

        return train

    def _on_mode(self, module: Any, mode: bool, frame: Any) -> None:
        if mode:
            if self._pending is not None:  # back to training: the waiting call was evaluation
                self._confirm()
            self._in_eval_mode()  # the trained model back in training: the window closes
            return
        if self._drops >= 2:  # twice trained in eval mode: this run evaluates under no_grad only
            return
        # Judged once per module and set of optimizers: an RL agent switches modes every step.
        if self._trained.judge(module, self.s.optimizers()):
            self._eval_model = weakref.ref(module)
            if self._quiet.enter(frame, self._patcher.ops.hits):
                self._patcher.ops.hold("eval-mode")  # its loss calls may be an evaluation

    def _in_eval_mode(self) -> bool:
        """Is the trained model in eval mode now (its last switch was ``eval()``)?"""
        ref = self._eval_model
        model = ref() if ref is not None else None
        if model is None or model.training:
            self._eval_model = None
            self._quiet.exit(self._patcher.ops.hits)
            self._patcher.ops.release("eval-mode")
            return False
        return True

    def in_evaluation(self) -> bool:
        """Has an evaluation run since the last training backward (for printed names)?"""
        return self.evaluated or self._in_eval_mode()

    # ---- one loss call ---------------------------------------------------------------------------
    def _on_loss(self, kind: str, logits: bool, input: Any, target: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        if is_traced() or not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
            return
        grad = torch.is_grad_enabled()
        if grad and not self._in_eval_mode():
            return
        if kind == "cls":
            ignore = kwargs.get("ignore_index", args[2] if len(args) > 2 else -100)
            got = _class_stats(input, target, int(ignore))
        else:
            got = _binary_stats(input, target, logits)
        if got is None:
            return
        vec, classes = got
        if kind == "cls":  # [correct, counted, loss summed]
            vec = torch.cat([vec, _loss_sum(out, kwargs, vec[1], vec.dtype)])
        else:  # [above 0.5, positive, count, loss summed, top score]
            vec = torch.cat([vec[:3], _loss_sum(out, kwargs, vec[2], vec.dtype), vec[3:]])
        step = self.s.clock.current_step
        self.evaluated = True
        self._wake()
        if grad and input.requires_grad:
            if self._pending is not None and self._pending[3] != step:  # an optimizer step since it
                self._trained_in_eval()
            elif self._pending is not None:  # a second call without a backward between
                self._confirm()
            self._pending = (kind, vec, classes, step)
            self._patcher.on_backward(self.name, before=self._on_backward)  # until the next backward
        else:
            self._add(kind, vec, classes, step)

    def _confirm(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._add(*pending)

    def _add(self, kind: str, vec: torch.Tensor, classes: int, step: int) -> None:
        ph = self._phase
        if ph is None:
            ph = self._phase = _Phase(step)
        if kind == "cls":
            if ph.classes and classes != ph.classes:
                return  # another head: the phase keeps the first one's
            ph.classes = classes
            ph.cls.append(vec)
            if len(ph.cls) >= _FOLD:
                ph.cls = [_sum(ph.cls)]
        else:
            ph.bin.append(vec)
            if len(ph.bin) >= _FOLD:
                ph.bin = [_fold_binary(ph.bin)]

    def _on_backward(self, loss: Any) -> None:
        self._patcher.drop_backward(self.name)
        if self._pending is not None:  # it fed this backward: the model trains in eval mode
            self._trained_in_eval()

    def _trained_in_eval(self) -> None:
        """The waiting call was training, the model in eval mode: it fed a backward, or an
        optimizer stepped after it (a loss returned as a float in eval mode gets no backward)."""
        self._pending = None
        self._eval_model = None
        self._patcher.ops.release("eval-mode")
        self._drops += 1

    # ---- the end of an evaluation ----------------------------------------------------------------
    def _wake(self) -> None:
        """Something waits for the round's end (an evaluation loss, printed metrics): listen to
        it. Rounds with nothing waiting (most of a run) do not call this probe at all."""
        self.s.clock.listen_round(self._on_round)

    def _on_round(self, step: int) -> None:
        self.s.clock.unlisten_round(self._on_round)
        if self.printed.held:
            self._guard("stdout", self.printed.publish)
        if self._pending is not None:  # a backward or a second step of its optimizer ends the round
            self._trained_in_eval()
        if self._phase is not None:
            self._guard(self.name, self._end_phase)
        self.evaluated = False

    def _end_phase(self) -> None:
        self._confirm()
        ph, self._phase = self._phase, None
        if ph is None or not (ph.cls or ph.bin):
            return
        parts = []
        if ph.cls:
            parts.append(_sum(ph.cls))
        if ph.bin:
            parts.append(_fold_binary(ph.bin))
        dev = parts[0].device
        packed = torch.cat([p.to(dev) for p in parts])
        step, classes, has_bin = ph.step, ph.classes if ph.cls else 0, bool(ph.bin)
        pub, s, name = self.pub, self.s, self.name

        def decode(vals: list[float]) -> Iterable[Event]:
            try:
                _publish(pub, step, vals, classes, has_bin)
            except Exception as exc:  # a decoder must not stop the stream
                s.fail(name, exc)
            return ()

        self.s.defer(packed, decode)


def _publish(pub: Publisher, step: int, vals: list[float], classes: int, has_bin: bool) -> None:
    pos = 0
    loss: tuple[float, float] | None = None  # (sum, count) of the losses the validation loss is
    if classes:
        correct, counted, loss_sum = vals[0:3]
        pos = 3
        if counted > 0:
            pub.derived(step, "val_classes", float(classes))
            pub.derived(step, "val_acc", correct / counted)
            loss = (loss_sum, counted)
    if has_bin:
        above, positive, count, bin_sum, top = vals[pos:pos + 5]
        if count > 0:
            pub.derived(step, "val_pos_rate", above / count)
            pub.derived(step, "val_base_rate", positive / count)
            pub.derived(step, "val_max_score", top)
            loss = loss or (bin_sum, count)  # a class loss, when there is one, is the model's
    if loss is not None and math.isfinite(loss[0]):  # NaN: a loss it cannot average (weighted)
        pub.derived(step, "val_loss", loss[0] / loss[1])


def _loss_sum(out: Any, kwargs: dict[str, Any], count: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """[the call's loss summed over the elements ``count`` counts] (device ops): its mean times
    the count, or its sum; NaN where that is not the sum of its per-element losses (a class
    ``weight`` or ``pos_weight`` divides the mean by other numbers) or the loss is no tensor."""
    reduction = kwargs.get("reduction", "mean")
    if (not isinstance(out, torch.Tensor) or kwargs.get("weight") is not None
            or kwargs.get("pos_weight") is not None or reduction not in ("mean", "sum", "none")):
        return torch.full((1,), math.nan, dtype=dt, device=count.device)
    total = out.detach().to(dt).sum()
    return (total * count if reduction == "mean" else total).reshape(1)


def _acc_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.device.type in ("cpu", "cuda") else torch.float32


def _sum(vecs: list[torch.Tensor]) -> torch.Tensor:
    dev = vecs[0].device
    return torch.stack([v.to(dev) for v in vecs]).sum(0)


def _fold_binary(vecs: list[torch.Tensor]) -> torch.Tensor:
    dev = vecs[0].device
    st = torch.stack([v.to(dev) for v in vecs])
    return torch.cat([st[:, :4].sum(0), st[:, 4:].amax(0)])


def _class_stats(input: torch.Tensor, target: torch.Tensor, ignore: int) -> tuple[torch.Tensor, int] | None:
    """[correct, counted] of the argmax predictions (device ops, no sync), and C."""
    x, t = input.detach(), target.detach()
    if x.ndim == 0 or x.numel() == 0:
        return None
    dim = 1 if x.ndim >= 2 else 0
    classes = int(x.shape[dim])
    pred = x.argmax(dim)
    if t.is_floating_point():  # class probabilities, shaped like the logits
        if t.shape != x.shape:
            return None
        labels, valid = t.argmax(dim), None
    else:
        if t.shape != pred.shape:
            return None
        labels, valid = t, t != ignore
    hit = pred == labels
    dt = _acc_dtype(x)
    if valid is None:
        counted = torch.full((), float(hit.numel()), dtype=dt, device=x.device)
        return torch.stack([hit.sum().to(dt), counted]), classes
    return torch.stack([(hit & valid).sum().to(dt), valid.sum().to(dt)]), classes


def _binary_stats(input: torch.Tensor, target: torch.Tensor, logits: bool) -> tuple[torch.Tensor, int] | None:
    """[scores above 0.5, targets >= 0.5, count, top score as a probability] (device ops)."""
    x, t = input.detach(), target.detach()
    if x.numel() == 0 or t.shape != x.shape:
        return None
    dt = _acc_dtype(x)
    above = (x > 0).sum() if logits else (x > 0.5).sum()
    top = x.max().to(dt)
    if logits:
        top = torch.sigmoid(top)
    count = torch.full((), float(x.numel()), dtype=dt, device=x.device)
    return torch.stack([above.to(dt), (t >= 0.5).sum().to(dt), count, top]), 0