"""Invariants every healthy run keeps, whatever the model: the order of training events and
the attributes of what flows through the step (live)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class EvalBeforeTrain:
    """A module whose eval-mode output relies on state that only a training-mode forward
    computes ran in eval mode before any such forward: legacy ``nn.utils.spectral_norm``
    divides its weight by ``estimate``, the power-iteration estimate of its spectral norm,
    against ``actual``, the spectral norm measured (``kind`` "spectral_norm"). ``where``: the
    user's call site of that forward."""

    step: int
    module: str
    kind: str
    estimate: float
    actual: float
    where: str = ""
    signal: ClassVar[str] = "eval_order"
