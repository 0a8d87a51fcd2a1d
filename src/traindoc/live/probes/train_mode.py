"""The mode a trained model trains in (trained-in-eval-mode), read on sampled steps.

A validation that calls ``model.eval()`` and nothing that calls ``model.train()`` again before
the next training step (it sits before the epoch loop, or at the top of an epoch while the
validation runs mid-epoch) leaves the rest of training with dropout off and BatchNorm
normalizing with running statistics it no longer updates. At a sampled step's root forward
with gradients on (the core probe's forward pre-hook, up on sampled steps only) the model's
mode-dependent modules (``eval_parts.mode_dependent``, listed once per model) are counted in
eval mode. The count waits for a backward or an optimizer step, which says the forward
trained: a forward with gradients on that neither follows (an evaluation written without
``no_grad``) is replaced by the model's next one. Only ``training`` flags are read; no tensor
is touched.
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from traindoc.events import TrainMode
from traindoc.live.objects import ObjectMap, user_site
from traindoc.live.probes.eval_parts import TrainedModels, mode_dependent, unwrap
from traindoc.live.session import Session

_NAMES = 4  # modules named in an event


class TrainModes:
    def __init__(self, session: Session) -> None:
        self.s = session
        self._parts = ObjectMap()  # model -> its mode-dependent modules, [(name, module)]
        self._trained = TrainedModels()
        self._pending: dict[int, TrainMode] = {}  # by id(model): its latest forward of the step

    def on_forward(self, module: nn.Module) -> None:
        """A root forward with gradients on, on a sampled step."""
        parts = self._parts.get(module)
        if parts is None:
            parts = [(n, m) for n, m in module.named_modules() if mode_dependent(m)]
            self._parts[module] = parts
        if not parts or not self._trained.judge(module, self.s.optimizers()):
            return
        off = [(n, m) for n, m in parts if not m.training]
        self._pending[id(module)] = TrainMode(
            step=self.s.clock.current_step, model=self.s.model.module_name(module), modules=len(parts),
            in_eval=len(off), root_eval=not unwrap(module).training,  # DDP's model.module.eval()
            names=tuple(f"{n} ({type(m).__name__})" for n, m in off[:_NAMES]),
            where=user_site() if off else "",
        )

    def on_backward(self, loss: Any) -> None:
        """The backward of a sampled step: the forwards waiting were training."""
        self._flush()

    def on_step(self, opt: Any, closure: bool) -> None:
        """An optimizer step of a sampled round: so were they, even with no backward (a loss
        the model returns as a float in eval mode gives the step no gradient)."""
        self._flush()

    def _flush(self) -> None:
        for event in self._pending.values():
            self.s.emit(event)
        self._pending.clear()
