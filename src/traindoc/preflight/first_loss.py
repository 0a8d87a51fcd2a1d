"""The first loss call of a launch, seen through a ``TorchFunctionMode``: ``F.cross_entropy``,
``F.nll_loss``, ``F.mse_loss`` and ``F.binary_cross_entropy(_with_logits)`` stay torch's own functions, so a
TorchScript model that calls them compiles, and a tensor subclass's ``__torch_function__`` sees
them as without traindoc.

The mode is pushed before the script starts, so it is under every mode the script pushes
(``with torch.device(...)``, ``set_default_device``), and taken out from where it is once the
first optimizer step is over (a step handed a closure, as Lightning's, runs its forward inside
the step). Its handler runs each call as the script made it (torch takes the mode off the
stack meanwhile) and keeps the first loss computed with gradients on; after that it only calls
through. A TorchScript function calls no mode: its losses are not seen.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from traindoc.preflight.state import LossCall, loss_call

_LOSSES = {F.cross_entropy: "cross_entropy", F.nll_loss: "nll_loss", F.mse_loss: "mse_loss",
           F.binary_cross_entropy_with_logits: "binary_cross_entropy_with_logits",
           F.binary_cross_entropy: "binary_cross_entropy"}


class FirstLoss(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.call: LossCall | None = None
        self.done = False  # a loss was kept: only call through from now on

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if self.done or torch.compiler.is_compiling():  # dynamo traces nothing of ours
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        name = _LOSSES.get(func)
        if name is not None and len(args) >= 2 and torch.is_grad_enabled():
            # torch hands the options to the mode as keywords, and the optional tensors
            # (weight, pos_weight) positionally after input and target
            self.call = loss_call(name, args[0], args[1], out, args[2:], kwargs)
            self.done = self.call is not None
        return out

    def put_up(self) -> None:
        torch._C._push_on_torch_function_stack(self)

    def take_out(self) -> None:
        """Take this mode off the thread's stack from wherever it is; the modes above it go
        back in their order."""
        self.done = True
        above: list[Any] = []
        try:
            while torch._C._len_torch_function_stack():
                mode = torch._C._pop_torch_function_stack()
                if mode is self:
                    break
                above.append(mode)
        finally:
            for mode in reversed(above):
                torch._C._push_on_torch_function_stack(mode)
