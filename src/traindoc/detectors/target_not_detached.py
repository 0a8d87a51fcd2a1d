"""target-not-detached: a model no optimizer steps, off the trained parameters' path, gets gradients."""

from __future__ import annotations

from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt
from traindoc.events import Event, UnsteppedModel
from traindoc.findings import Finding


class TargetNotDetached(Detector):
    """Fires at the first sampled step where a model that no optimizer holds, and whose output's
    graph reaches no parameter an optimizer holds, got gradients (``UnsteppedModel``): a target
    network or a teacher called with autograd on. The evidence follows the gradients it kept
    accumulating (nothing clears them) to the last sampled step."""

    id = "target-not-detached"
    needs = frozenset({"unstepped"})
    examples = (
        Example("zoo/rl_dqn_target_with_grad.py", 0),
        Example("zoo/distill_teacher_with_grad.py", 75),
        Example("zoo/healthy_rl_dqn.py", None),
        Example("zoo/healthy_distillation.py", None),
        Example("zoo/optimizer_mismatch.py", None),  # a model re-created after its optimizer
    )

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        self._first: dict[str, UnsteppedModel] = {}
        self._last: dict[str, UnsteppedModel] = {}

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, UnsteppedModel)
        self._last[event.model] = event
        if event.model not in self._first:
            self._first[event.model] = event
            yield self._finding(event.model)

    def finish(self) -> Iterator[Finding]:
        for model in self._first:
            yield self._finding(model)

    def _finding(self, model: str) -> Finding:
        first, last = self._first[model], self._last[model]
        call = f" ({first.where})" if first.where else ""
        grown = (f"; its gradient norm went from {fmt(first.grad)} at step {first.step} to "
                 f"{fmt(last.grad)} at step {last.step}" if last.step != first.step else "")
        # Named as the code calls it (q_target, self.teacher), or by its class when no
        # variable of the user's held it.
        named = model != first.cls
        who = model if named else f"the {first.cls} model"
        obj = model if named else "model"
        size = f"{first.cls}, " if named else ""
        return finding(
            self.id, step=first.step,
            message=(f"{who} ({size}{first.numel:,} elements in {first.params} tensors) got "
                     f"gradients at step {first.step}{call}, though no optimizer holds its "
                     f"parameters and no trained parameter's gradient flows through it{grown}."),
            cause=(f"{who}'s output was computed with autograd on: every backward also runs "
                   f"through it and fills its .grad, which no optimizer uses or clears."),
            fix=((f"At {first.where}, c" if first.where else "C")
                 + f"ompute {who}'s output under `with torch.no_grad():` (or `.detach()` it) and "
                 f"call `{obj}.requires_grad_(False)`; if it is meant to train, add its "
                 f"parameters to the optimizer."),
            evidence={"model": model, "class": first.cls, "elements": first.numel,
                      "tensors": first.params, "first_step": first.step, "grad_norm_first": first.grad,
                      "last_step": last.step, "grad_norm_last": last.grad},
            where=[first.where or model],
        )
