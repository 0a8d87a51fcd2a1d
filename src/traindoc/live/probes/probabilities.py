"""A class-index loss given probabilities (``cross-entropy-on-probabilities``).

``nn.CrossEntropyLoss`` takes logits and applies its own log_softmax: a model whose last layer
is ``nn.Softmax`` (or a softmax in the loop, or a mixture of softmax experts) hands it
probabilities, so it takes the log_softmax of numbers in [0, 1]. The loss can then never fall
below ln(1 + (C-1)/e) and its gradient shrinks as the model grows confident. ``F.nll_loss``
takes log-probabilities: given a softmax's output it minimizes -p, not -log p.

Just before the backward of a sampled training step, the loss's autograd graph is read from
its top through the loss's own nodes to each nll_loss, and under it through a cross-entropy's
log_softmax and the nodes that mix or reshape probabilities, to a softmax (a log ends the walk:
``nll_loss(torch.log(p))`` is right): ``measure.probabilities_loss``. Only node names, saved
dims and shape metadata are read: no tensor op, no sync.
"""

from __future__ import annotations

from typing import Any

import torch

from traindoc.events import LossOnProbabilities
from traindoc.live import measure
from traindoc.live.objects import user_site
from traindoc.live.probes.base import Probe


class ProbabilitiesProbe(Probe):
    name = "probabilities"
    signals = ("loss_on_probabilities",)

    def install(self) -> None:
        self._patcher.on_backward(self.name, before=self._on_loss, sampled_only=True)

    def _on_loss(self, loss: Any) -> None:
        if not (self.clock.measuring and isinstance(loss, torch.Tensor) and loss.numel() == 1
                and loss.grad_fn is not None):
            return
        found = measure.probabilities_loss(loss.grad_fn)
        if found is None:
            return
        self.s.next_step_begins()
        w = found.weight
        layer = f"{self.s.model.param_name(w)} {list(w.shape)}" if w is not None else ""
        self.s.emit(LossOnProbabilities(
            step=self.clock.current_step, loss=found.loss, classes=found.classes, shape=str(list(found.shape)),
            dim=found.dim, layer=layer, where=user_site(1)))
