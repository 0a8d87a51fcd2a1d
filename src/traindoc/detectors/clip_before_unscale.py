"""clip-before-unscale: gradients clipped while still multiplied by the GradScaler's scale."""

from __future__ import annotations

from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, is_adaptive
from traindoc.detectors._maths import median
from traindoc.events import Event, Optimizer, ScaledClip
from traindoc.findings import EvidenceValue, Finding



class ClipBeforeUnscale(Detector):
    """``clip_grad_norm_`` or ``clip_grad_value_`` ran after ``scaler.scale(loss).backward()`` and
    before ``scaler.unscale_(optimizer)`` for the optimizer holding the clipped parameters: the
    clip compares gradients multiplied by the scale (65536 at the start) with max_norm, and
    ``scaler.step`` divides them by the scale afterwards. Fires at the first such call."""

    id = "clip-before-unscale"
    needs = frozenset({"amp"})
    uses = frozenset({"optimizer"})
    examples = (
        Example("zoo/amp_clip_before_unscale.py", 0),
        Example("zoo/healthy_amp.py", None),
    )

    # Carried over a resume: the clips of still-scaled gradients (how many, the first 200) and the
    # optimizer quoted.
    carry = ("_calls", "_count", "_optimizer", "_lr")

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        self._calls: list[ScaledClip] = []
        self._count = 0
        self._optimizer = ""
        self._lr: float | None = None

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Optimizer):
            if self._lr is None and event.groups:
                self._optimizer, self._lr = event.cls, event.groups[0].lr
            return
        if not isinstance(event, ScaledClip) or not event.scale > 0:
            return  # a scale of 0 (a collapsed scaler, grad-scaler-collapse's) tells no factor
        self._count += 1
        if len(self._calls) < 200:
            self._calls.append(event)
        if self._count == 1:
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._calls:
            yield self._finding()

    def _finding(self) -> Finding:
        first = self._calls[0]
        where = next((c.where for c in self._calls if c.where), "")
        at = f" at {where}" if where else ""
        scale = median([c.scale for c in self._calls])
        opt = self._optimizer or "the optimizer"
        lr = f" (lr {fmt(self._lr)})" if self._lr is not None else ""
        normed = [(c, c.norm) for c in self._calls if c.norm is not None]  # clip_grad_norm_ calls
        evidence: dict[str, EvidenceValue] = {
            "calls": self._count, "first_step": first.step, "function": first.fn,
            "max_norm": first.max_norm, "scale": scale, "where": where, "optimizer": self._optimizer,
        }
        if normed:
            scaled = median([n for _, n in normed])
            true = median([n / c.scale for c, n in normed if c.scale])
            effective = median([min(n, c.max_norm) / c.scale for c, n in normed if c.scale])
            clipped = sum(n > c.max_norm for c, n in normed) / len(normed)
            shrink = true / effective if effective > 0 else float("inf")
            measured = (
                f"It measured a median norm of {fmt(scaled)} for a true gradient norm of {fmt(true)}, "
                f"clipped {clipped:.0%} of the calls to {fmt(first.max_norm)}, and scaler.step then "
                f"divided by the scale: the updates used gradients of norm {fmt(effective)} instead of "
                f"{fmt(true)} ({fmt(shrink)}x smaller)."
            )
            evidence.update(scaled_norm=scaled, true_norm=true, effective_norm=effective, clip_rate=clipped,
                            shrink_factor=shrink)
        else:
            measured = (f"Each gradient element was clipped to +-{fmt(first.max_norm)} while multiplied by "
                        f"{fmt(scale)}: after unscaling every element is at most {fmt(first.max_norm / scale)}.")
        if is_adaptive(self._optimizer):
            effect = (f"{opt} divides by its running gradient size, so the damage is partly hidden: every "
                      "step's gradient is rescaled to the same norm (the LR schedule no longer sets the "
                      "step size), and where it falls near eps the updates shrink.")
        else:
            effect = (f"{opt}{lr} scales its update by the gradient itself, so the model barely moves: "
                      "training proceeds about as many times slower as the scale is large.")
        return finding(
            self.id, step=first.step,
            message=(
                f"{first.fn}(max_norm={fmt(first.max_norm)}){at} ran on gradients still multiplied by the "
                f"GradScaler's scale ({fmt(scale)}), before scaler.unscale_(optimizer), on {self._count} "
                f"call(s) from step {first.step}. {measured}"
            ),
            cause=(
                "scaler.scale(loss).backward() leaves every gradient multiplied by the scale until "
                "scaler.unscale_(optimizer) or scaler.step(optimizer) divides it out; a clip between "
                f"them compares scaled gradients with max_norm. {effect} Each change of the scale "
                "changes the effective clip again."
            ),
            fix=(
                "Unscale first, then clip, then step: scaler.scale(loss).backward(); "
                "scaler.unscale_(optimizer); torch.nn.utils.clip_grad_norm_(model.parameters(), "
                f"max_norm={fmt(first.max_norm)}); scaler.step(optimizer); scaler.update(). With gradient "
                "accumulation, unscale once after the last micro-batch. With bf16 autocast drop the "
                "scaler and clip directly."
            ),
            evidence=evidence,
            where=[where] if where else [],
        )
