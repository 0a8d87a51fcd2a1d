"""What a launch measures, as plain values: the RNG states, the first loss call, gradients."""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class LossCall:
    """The first loss function call of the run: which one, its value and what it implies."""

    fn: str  # cross_entropy, nll_loss, mse_loss, binary_cross_entropy_with_logits, ...
    value: float
    classes: int = 0  # cross-entropy: the size of the class dimension
    target_sq: float = math.nan  # mse: mean of target**2 (the loss of predicting 0)
    output_std: float = math.nan  # the std of the loss's input (logits / predictions)
    output_mean: float = math.nan  # and its mean
    unjudged: str = ""  # why its value has no reference: options that move it (weights), inputs

    @property
    def classification(self) -> bool:
        return self.fn in CLASSIFICATION


CLASSIFICATION = ("cross_entropy", "nll_loss")  # over classes: ln(C) for an untrained model


class RngState:
    """The global RNGs (torch CPU and CUDA, Python, numpy), captured and restored."""

    def __init__(self, torch_state: torch.Tensor, cuda: list[torch.Tensor] | None, py: Any, np_state: Any) -> None:
        self.torch_state, self.cuda, self.py, self.np_state = torch_state, cuda, py, np_state

    @classmethod
    def capture(cls) -> "RngState":
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        np = sys.modules.get("numpy")
        return cls(torch.get_rng_state(), cuda, random.getstate(),
                   np.random.get_state() if np is not None else None)

    def restore(self) -> None:
        torch.set_rng_state(self.torch_state)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.py)
        np = sys.modules.get("numpy")
        if np is not None and self.np_state is not None:
            np.random.set_state(self.np_state)


def numpy_rng_hash() -> int:
    np = sys.modules.get("numpy")
    if np is None:
        return 0
    state = np.random.get_state()
    return hash((state[0], bytes(state[1].tobytes()), state[2]))


def clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)(*(clone(o) for o in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone(o) for o in obj)
    if isinstance(obj, dict):
        return {k: clone(v) for k, v in obj.items()}
    return obj


def grad_table(opt: Any, reached: set[str]) -> dict[str, tuple[bool, float, bool]]:
    """Per parameter (by id, named later): (has a gradient, its norm, all values finite). Left
    out, while others have a gradient: a parameter whose gradient the script removed after
    backward (its id in ``reached``, no gradient now), frozen for this step on purpose, as for a
    warm-up. (All of them removed is a ``zero_grad()`` between backward and step.)"""
    table: dict[str, tuple[bool, float, bool]] = {}
    for g in opt.param_groups:
        for p in g["params"]:
            if not p.requires_grad:
                continue
            if p.grad is None:
                table[str(id(p))] = (False, 0.0, True)
                continue
            grad = p.grad.detach().float()
            finite = bool(torch.isfinite(grad).all())
            norm = float(grad.norm()) if finite else math.inf
            table[str(id(p))] = (True, norm, finite)
    if any(has for has, _, _ in table.values()):
        table = {k: v for k, v in table.items() if v[0] or k not in reached}
    return table


def loss_call(name: str, input: Any, target: Any, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> LossCall | None:
    if not isinstance(input, torch.Tensor) or not isinstance(out, torch.Tensor) or out.numel() != 1:
        return None
    value = float(out.detach().float())
    if name == "mse_loss" and isinstance(target, torch.Tensor) and target.requires_grad and not input.requires_grad:
        # mse_loss(td_target, q_values), as CleanRL's DQN writes it: the loss is symmetric, and
        # the prediction is the argument that trains
        input, target = target, input
    std = float(input.detach().float().std()) if input.numel() > 1 else math.nan
    mean = float(input.detach().float().mean())
    # The nn loss modules pass their options (weight=None ...) positionally or by keyword:
    # only the defaults keep the reference value.
    reduction = kwargs.get("reduction", "mean")
    judged = reduction in ("mean", "sum") and all(a is None for a in args) and \
        kwargs.get("weight") is None and kwargs.get("pos_weight") is None
    why = "" if judged else "uses class weights, a sum reduction or extra arguments, which move its expected value"
    if reduction == "sum" and isinstance(target, torch.Tensor):
        # a sum divided by the number of counted elements afterwards (HF Trainer's causal-LM and
        # classification losses, given num_items_in_batch): the mean is the value to judge
        counted = target != kwargs.get("ignore_index", -100) if name in CLASSIFICATION and \
            not target.is_floating_point() else torch.ones_like(target, dtype=torch.bool)
        value /= max(1, int(counted.sum()))
    if name in CLASSIFICATION:
        classes = int(input.shape[1] if input.dim() >= 2 else input.shape[0])
        if name == "nll_loss" and not why and not _log_probabilities(input):
            why = "takes scores that are not log-probabilities (no log_softmax before it), so its value has no reference"
        return LossCall(name, value, classes=classes, output_std=std, output_mean=mean, unjudged=why)
    if name == "mse_loss" and isinstance(target, torch.Tensor):
        sq = float(target.detach().float().pow(2).mean())
        return LossCall(name, value, target_sq=sq, output_std=std, output_mean=mean, unjudged=why)
    return LossCall(name, value, classes=2, output_std=std, output_mean=mean, unjudged=why)


def _log_probabilities(x: torch.Tensor) -> bool:
    """Rows (over dim 1, the class dimension) whose exponentials sum to 1, as log_softmax gives."""
    if x.dim() < 1 or not x.is_floating_point():
        return False
    total = torch.logsumexp(x.detach().float(), dim=1 if x.dim() >= 2 else 0)
    return bool((total.abs() < 1e-3).all())
