"""The top of the loss's autograd graph, read before a sampled step's backward: a softmax over
one class (``single-class-softmax``) and probabilities handed to a class-index loss
(``cross-entropy-on-probabilities``).

``F.cross_entropy`` on a model with one output (``nn.Linear(h, 1)``, a segmentation head with
one channel) takes a log_softmax over a dimension of size 1, and a ``softmax(dim=1)`` before a
BCE does the same: the probability of the only class is 1 whatever the logits, so the loss is a
constant (0 for a cross-entropy) and no gradient reaches the model through it.

``nn.CrossEntropyLoss`` takes logits and applies its own log_softmax: a model whose last layer
is ``nn.Softmax`` (or a softmax in the loop, or a mixture of softmax experts) hands it
probabilities, so the loss can never fall below ln(1 + (C-1)/e) and its gradient fades as the
model grows confident. ``F.nll_loss`` takes log-probabilities: given a softmax's output it
minimizes -p, not -log p.

Both are read from the loss's top through the loss's own nodes (reductions, arithmetic, shape
changes, the loss functions; a layer ends the walk, so a softmax inside the model, attention
over one key, is never seen): ``loss_side.singleton_softmax``, and under each nll_loss, through a
cross-entropy's log_softmax and the nodes that mix or reshape probabilities, to a softmax (a
log ends that walk: ``nll_loss(torch.log(p))`` is right): ``loss_side.probabilities_loss``. Only
node names, saved dims and shape metadata are read: no tensor op, no sync. What is found is an
event with the layer that made the softmax's input, named after the user's parameter.
"""

from __future__ import annotations

from typing import Any

import torch

from traindoc.events import LossOnProbabilities, SingleClass
from traindoc.live import loss_side
from traindoc.live.objects import user_site
from traindoc.live.probes.base import Probe


class LossGraphProbe(Probe):
    name = "loss_graph"
    signals = ("single_class", "loss_on_probabilities")

    def install(self) -> None:
        self._patcher.on_backward(self.name, before=self._on_loss, sampled_only=True)

    def _on_loss(self, loss: Any) -> None:
        if not (self.clock.measuring and isinstance(loss, torch.Tensor) and loss.numel() == 1
                and loss.grad_fn is not None):
            return
        one = loss_side.singleton_softmax(loss.grad_fn)
        probs = loss_side.probabilities_loss(loss.grad_fn)
        if one is None and probs is None:
            return
        self.s.next_step_begins()
        step, where = self.clock.current_step, user_site(1)
        if one is not None:
            self.s.emit(SingleClass(
                step=step, op=one.op, shape=str(list(one.shape)), dim=one.dim, taken_by=one.taken_by,
                targets=one.targets, layer=self._layer(one.weight), alone=one.alone, where=where))
        if probs is not None:
            self.s.emit(LossOnProbabilities(
                step=step, loss=probs.loss, classes=probs.classes, shape=str(list(probs.shape)), dim=probs.dim,
                layer=self._layer(probs.weight), where=where))

    def _layer(self, weight: torch.Tensor | None) -> str:
        """The user's name of the layer's weight and its shape (``fc.weight [1, 64]``)."""
        return f"{self.s.model.param_name(weight)} {list(weight.shape)}" if weight is not None else ""
