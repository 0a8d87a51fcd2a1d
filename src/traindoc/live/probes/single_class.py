"""A loss over one class (``single-class-softmax``).

``F.cross_entropy`` on a model with one output (``nn.Linear(h, 1)``, a segmentation head with
one channel) takes a log_softmax over a dimension of size 1, and a ``softmax(dim=1)`` before a
BCE does the same: the probability of the only class is 1 whatever the logits, so the loss is a
constant (0 for a cross-entropy) and no gradient reaches the model through it.

Just before the backward of a sampled training step, the loss's autograd graph is read from
its top through the loss's own nodes (reductions, arithmetic, shape changes, the loss
functions; a layer ends the walk, so attention over one key inside the model is never seen):
``measure.singleton_softmax``. Only node names, saved dims and shape metadata are read: no
tensor op, no sync.
A softmax found over a dimension of size 1 gives a ``SingleClass`` event with the layer that
made the one-wide input, named after the user's parameter.
"""

from __future__ import annotations

from typing import Any

import torch

from traindoc.events import SingleClass
from traindoc.live import measure
from traindoc.live.objects import user_site
from traindoc.live.probes.base import Probe


class SingleClassProbe(Probe):
    name = "single_class"
    signals = ("single_class",)

    def install(self) -> None:
        self._patcher.on_backward(self.name, before=self._on_loss, sampled_only=True)

    def _on_loss(self, loss: Any) -> None:
        if not (self.clock.measuring and isinstance(loss, torch.Tensor) and loss.numel() == 1
                and loss.grad_fn is not None):
            return
        found = measure.singleton_softmax(loss.grad_fn)
        if found is None:
            return
        self.s.next_step_begins()
        w = found.weight
        layer = f"{self.s.model.param_name(w)} {list(w.shape)}" if w is not None else ""
        self.s.emit(SingleClass(
            step=self.clock.current_step, op=found.op, shape=str(list(found.shape)), dim=found.dim,
            taken_by=found.taken_by, targets=found.targets, layer=layer, alone=found.alone,
            where=user_site(1)))
