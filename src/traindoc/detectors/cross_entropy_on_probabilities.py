"""cross-entropy-on-probabilities: a class-index loss is given a softmax's output."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require, site_and_layer
from traindoc.events import Event, LossOnProbabilities, Scalar
from traindoc.findings import Finding


class CrossEntropyOnProbabilities(Detector):
    """On ``confirm`` sampled training steps, the loss's ``cross_entropy`` took the log_softmax
    of a softmax's output, or its ``nll_loss`` took a softmax's output where log-probabilities
    belong (``LossOnProbabilities``): ``nn.Softmax`` as the model's last layer before
    ``nn.CrossEntropyLoss``, ``F.nll_loss(F.softmax(x))``, a mixture of softmax experts handed to
    a cross-entropy. A cross-entropy of probabilities over C classes can never fall below
    ln(1 + (C-1)/e), and its gradient fades as the model grows confident (the softmax's
    p(1-p)); an nll_loss of probabilities minimizes -p, which is negative and has no log's pull
    on the wrong answers. The run's lowest loss from the first such step on is quoted against
    that floor."""

    id = "cross-entropy-on-probabilities"
    needs = frozenset({"loss_on_probabilities"})
    uses = frozenset({"loss"})
    examples = (
        Example("zoo/softmax_layer_into_cross_entropy.py", 0),
        Example("zoo/nll_loss_of_softmax.py", 0),
        Example("zoo/moe_softmax_experts_cross_entropy.py", 0),
        Example("zoo/healthy_softmax_for_accuracy_only.py", None),
        Example("zoo/healthy_log_of_mixture_nll.py", None),
    )

    # Carried over a resume: the flagged steps' count, the first one's details, the lowest loss.
    carry = ("_count", "_first", "_low", "_recent", "_fired")

    @dataclass(frozen=True)
    class Config:
        confirm: int = 3  # sampled steps with probabilities into the loss, before firing

        def __post_init__(self) -> None:
            require(self, confirm=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._count = 0
        self._first: dict[str, object] = {}  # the first flagged step's event, as data
        self._low: float | None = None  # the lowest loss from the first flagged step on
        self._recent: list[int] = []  # the last flagged steps: a step is counted once
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Scalar):
            if event.name == "loss" and self._first and event.value == event.value:  # the run's lowest since
                self._low = event.value if self._low is None else min(self._low, event.value)
            return
        assert isinstance(event, LossOnProbabilities)
        if event.step in self._recent:
            return
        self._count += 1
        self._recent = [*self._recent[-7:], event.step]
        if not self._first:
            self._first = {"step": event.step, "loss": event.loss, "classes": event.classes,
                           "shape": event.shape, "dim": event.dim, "layer": event.layer, "where": event.where}
        if self._count >= self.config.confirm and not self._fired:
            self._fired = True
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._fired:  # again, with every step counted and every loss seen
            yield self._finding()

    def _finding(self) -> Finding:
        e = self._first
        loss, classes, layer = str(e["loss"]), int(str(e["classes"])), str(e["layer"])
        ce = loss == "cross_entropy"
        floor = floor_of(classes) if ce else -1.0
        where = f" at {e['where']}" if e["where"] else ""
        source = f" The logits come from `{layer}`." if layer else ""
        took = (f"its cross_entropy took the log_softmax of a softmax's output (over dim {e['dim']} of a "
                f"{e['shape']} tensor, {classes} classes)" if ce else
                f"its nll_loss took a softmax's output (over dim {e['dim']} of a {e['shape']} tensor, "
                f"{classes} classes), not its log")
        if ce:
            bound = (f" A cross-entropy of probabilities over {classes} classes cannot fall below "
                     f"ln(1 + {classes - 1}/e) = {fmt(floor)}, and its gradient fades as the model grows confident.")
        else:
            bound = (" An nll_loss of probabilities is -p, between -1 and 0: it has no log's pull on "
                     "confident wrong answers.")
        seen = f" The lowest loss since was {fmt(self._low)}." if self._low is not None else ""
        message = (f"On {self._count} sampled steps (first at step {e['step']}), the loss handed to backward"
                   f"{where}: {took}."
                   f"{source}{bound}{seen}")
        return finding(
            self.id, step=int(str(e["step"])), message=message, fix=_fix(ce, layer),
            evidence={"steps": self._count, "loss": loss, "classes": classes, "shape": str(e["shape"]),
                      "dim": int(str(e["dim"])), "layer": layer, "floor": floor, "loss_min": self._low},
            where=site_and_layer(str(e["where"]), layer))


def floor_of(classes: int) -> float:
    """The lowest cross-entropy of a probability vector over ``classes`` classes: one class at
    1, the rest at 0, taken through log_softmax: -log(e / (e + C - 1))."""
    return math.log(1.0 + (classes - 1) / math.e)


def _fix(ce: bool, layer: str) -> str:
    name = f"`{layer.split(' ')[0]}`'s layer" if layer else "the last layer"
    if ce:
        return (f"Hand the cross-entropy the raw logits of {name}: remove the `nn.Softmax` (or "
                "`softmax`) before `nn.CrossEntropyLoss`/`F.cross_entropy`, which applies its own "
                "log_softmax, and take the softmax only where probabilities are read (accuracy, "
                "inference). A mixture of probabilities needs `F.nll_loss(torch.log(p + eps), y)`.")
    return ("Give `F.nll_loss` log-probabilities: `F.log_softmax(logits, dim=1)` in place of the "
            "softmax (or `F.cross_entropy` on the logits).")
