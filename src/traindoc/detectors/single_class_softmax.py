"""single-class-softmax: the loss takes a softmax over one class, so it is a constant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require, site_and_layer
from traindoc.events import Event, Scalar, SingleClass
from traindoc.findings import Finding


class SingleClassSoftmax(Detector):
    """On ``confirm`` sampled training steps, the loss took a softmax (or the log_softmax of a
    cross-entropy) over a dimension of size 1 on its own side of the model (``SingleClass``):
    a model with one output handed to ``cross_entropy``, a one-channel segmentation map to
    ``CrossEntropyLoss``, ``softmax(dim=1)`` of a ``[B, 1]`` output before a BCE. The softmax of
    one value is exactly 1, so the loss does not depend on the model and no gradient reaches
    it. The losses handed to backward on those steps are quoted: a cross-entropy is 0 on every
    step, a BCE of the constant 1 moves with the batch's labels and looks like noise."""

    id = "single-class-softmax"
    needs = frozenset({"single_class"})
    uses = frozenset({"loss"})
    examples = (
        Example("zoo/single_class_cross_entropy_regression.py", 0),
        Example("zoo/single_class_softmax_bce.py", 0),
        Example("zoo/single_class_segmentation_map.py", 0),
        Example("zoo/healthy_single_output_regression.py", None),
        Example("zoo/healthy_single_logit_bce.py", None),
        Example("zoo/healthy_attention_one_key.py", None),
    )

    # Carried over a resume: the flagged steps' count, the first one's details, their losses.
    carry = ("_count", "_first", "_losses", "_recent", "_fired")

    @dataclass(frozen=True)
    class Config:
        confirm: int = 3  # sampled steps with a softmax over one class, before firing

        def __post_init__(self) -> None:
            require(self, confirm=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._count = 0
        self._first: dict[str, object] = {}  # the first flagged step's SingleClass, as data
        self._losses: list[float] = []  # min, max of the losses of flagged steps
        self._recent: list[int] = []  # the last flagged steps, whose loss may still come
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Scalar):
            if event.name == "loss" and event.step in self._recent and event.value == event.value:
                lo, hi = self._losses or (event.value, event.value)
                self._losses = [min(lo, event.value), max(hi, event.value)]
            return
        assert isinstance(event, SingleClass)
        if event.step in self._recent:
            return
        self._count += 1
        self._recent = [*self._recent[-7:], event.step]
        if not self._first:
            self._first = {"step": event.step, "op": event.op, "shape": event.shape, "dim": event.dim,
                           "taken_by": event.taken_by, "targets": event.targets, "layer": event.layer,
                           "alone": event.alone, "where": event.where}
        if self._count >= self.config.confirm and not self._fired:
            self._fired = True
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._fired:  # again, with every step counted and every loss seen
            yield self._finding()

    def _finding(self) -> Finding:
        e = self._first
        op, taken_by, targets, layer = str(e["op"]), str(e["taken_by"]), str(e["targets"]), str(e["layer"])
        ce = op == "log_softmax" and taken_by in ("nll_loss", "nll_loss2d", "mul", "sum")
        what = ("its cross-entropy's log_softmax" if ce
                else f"a {op}" + (f" (taken by {taken_by})" if taken_by else ""))
        where = f" at {e['where']}" if e["where"] else ""
        source = f" The one-wide input comes from `{layer}`: a layer with one output." if layer else ""
        losses = ""
        if e["alone"] and self._losses:
            lo, hi = self._losses
            losses = (f" The loss was {fmt(lo)} on those steps" if lo == hi
                      else f" The loss moved between {fmt(lo)} and {fmt(hi)} on those steps, with the batches alone")
            losses += ": it does not depend on the model."
        elif not e["alone"]:
            losses = (" The loss's other terms still reach the model: only they train it, and this "
                      "term adds a constant" + (" 0." if ce else "."))
        message = (f"On {self._count} sampled steps (first at step {e['step']}), the loss handed to backward"
                   f"{where} took {what} over dim {e['dim']} of a {e['shape']} tensor: one class. The "
                   "softmax of one value is 1 whatever the model outputs, so no gradient reaches the "
                   f"model through it.{source}{losses}")
        return finding(
            self.id, step=int(str(e["step"])), message=message, fix=_fix(ce, targets, layer),
            evidence={"steps": self._count, "op": op, "shape": str(e["shape"]), "dim": int(str(e["dim"])),
                      "taken_by": taken_by, "targets": targets, "layer": layer, "alone": bool(e["alone"]),
                      "loss_min": self._losses[0] if self._losses else None,
                      "loss_max": self._losses[1] if self._losses else None},
            where=site_and_layer(str(e["where"]), layer))


def _fix(ce: bool, targets: str, layer: str) -> str:
    """The fix in the terms the run showed: which loss, given what the targets are."""
    name = f"`{layer.split(' ')[0]}`'s layer" if layer else "the last layer"
    if ce and targets == "floats":
        return ("The targets are floats. For values (regression), use `F.mse_loss(output, target)`; "
                "for the probability of one class, `F.binary_cross_entropy_with_logits(output, target)` "
                f"on the raw output. For C classes, give {name} C outputs.")
    if ce:
        return (f"Give {name} one output per class (2 for a binary task) and keep the cross-entropy, "
                "or keep one output and use `F.binary_cross_entropy_with_logits` with float 0/1 targets.")
    return ("Replace the softmax with a sigmoid (`torch.sigmoid`, or better "
            "`F.binary_cross_entropy_with_logits` on the raw output): a sigmoid gives one unit a "
            f"probability, a softmax needs one unit per class ({name} would need 2 outputs).")
