"""frozen-param-updated: a parameter with requires_grad=False changed during training."""

from __future__ import annotations

from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names
from traindoc.events import Event, FreezeSkipped, Optimizer, ParamStats
from traindoc.findings import Finding


class FrozenParamUpdated(Detector):
    """An optimizer step changed a parameter whose requires_grad is False: the freeze does not
    hold (momentum or weight decay keep moving it through a stale zero gradient). Also: an
    optimizer step changed a parameter that a module's ``train()`` override would freeze, when
    that override never ran before training (``FreezeSkipped``): the freeze never happened.

    Autograd never fills the gradient of a tensor with requires_grad=False, so a non-zero
    gradient that changes from one sampled step to the next was written by the script: training
    on detached parameters with gradients computed by ``torch.func.grad`` (or an evolution
    strategy's estimate) assigned to ``.grad`` before ``optimizer.step()``. Such a parameter is
    not frozen and is not judged. A non-zero gradient is judged at the next sampled step: the
    same norm again is a stale gradient still moving the parameter."""

    id = "frozen-param-updated"
    needs = frozenset({"params"})
    uses = frozenset({"optimizer", "freeze"})
    examples = (
        Example("zoo/frozen_param_updated.py", 10),
        Example("zoo/freeze_in_train_never_called.py", 0),
        Example("zoo/healthy_freeze_in_train.py", None),
        Example("zoo/healthy_finetune.py", None),
        Example("zoo/healthy_dp_sgd_functional.py", None),  # gradients written to detached tensors
    )

    # Carried over a resume: the optimizers' groups, the frozen parameters that moved, and the
    # freezes that never ran.
    carry = ("_opt", "_moved", "_skipped", "_unfrozen", "_stale")

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        self._opt: dict[int, Optimizer] = {}
        self._moved: dict[str, tuple[int, float, int]] = {}
        self._skipped: dict[str, FreezeSkipped] = {}  # parameter -> the freeze that never ran
        self._unfrozen: dict[str, tuple[int, float]] = {}  # of those, moved: (step, change)
        # A frozen parameter that moved with a non-zero gradient: (step, change, its gradient norm),
        # until the next sampled step tells a stale gradient from one the script writes each step.
        self._stale: dict[str, tuple[int, float, float]] = {}

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Optimizer):
            self._opt[event.index] = event
            return
        if isinstance(event, FreezeSkipped):
            for name in event.params:
                self._skipped.setdefault(name, event)
            return
        assert isinstance(event, ParamStats)
        if event.requires_grad and event.name in self._skipped and event.update and event.optimizer >= 0:
            if event.name not in self._unfrozen:
                self._unfrozen[event.name] = (event.step, event.update)
                if len(self._unfrozen) == 1:
                    yield self._skipped_finding()
            return
        if event.requires_grad or event.optimizer < 0 or not event.update or event.name in self._moved:
            return
        step, update = event.step, event.update
        if event.grad:  # see the class docstring
            seen = self._stale.get(event.name)
            if seen is None or seen[2] != event.grad:
                self._stale[event.name] = (step, update, event.grad)
                return
            step, update = seen[0], seen[1]
        self._moved[event.name] = (step, update, event.optimizer)
        yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if len(self._unfrozen) > 1:
            yield self._skipped_finding()  # final evidence: every parameter that moved

    def _skipped_finding(self) -> Finding:
        items = sorted(self._unfrozen.items(), key=lambda kv: kv[1][0])
        first, (step, change) = items[0]
        skip = self._skipped[first]
        return finding(
            self.id, step=step,
            message=(
                f"{skip.cls}.train() ({skip.where}) freezes {len(skip.params)} parameter(s) of "
                f"{skip.module}, but train() was never called on it before the first optimizer "
                f"step: {len(items)} of them trained, first at step {step} ({first}: relative "
                f"change {fmt(change)}): {names([n for n, _ in items])}."
            ),
            cause=(f"The freeze lives in {skip.cls}.train() (mmcv's frozen_stages / norm_eval "
                   "style) and the loop never calls model.train(): modules start in training "
                   "mode, so nothing else needed it. The parameters meant to stay fixed train."),
            fix=(f"Call model.train() before the training loop (and after every evaluation), or "
                 f"freeze in {skip.cls}.__init__ as well, before the optimizer is built."),
            evidence={"module": skip.module, "class": skip.cls, "override": skip.where,
                      "would_freeze": list(skip.params[:50]),
                      "moved": [n for n, _ in items][:50], "first_step": step},
            where=[skip.where],
        )

    def _finding(self) -> Finding:
        items = sorted(self._moved.items(), key=lambda kv: kv[1][0])
        first_name, (step, upd, oi) = items[0]
        opt = self._opt.get(oi)
        hyper = ""
        if opt is not None:
            g = opt.groups[0]
            hyper = f" {opt.cls} has momentum {fmt(g.momentum)} and weight_decay {fmt(g.weight_decay)}."
        return finding(
            self.id, step=step,
            message=(
                f"{len(items)} parameter(s) with requires_grad=False changed in an optimizer step, "
                f"first at step {step} ({first_name}: relative change {fmt(upd)}): {names([n for n, _ in items])}."
                + hyper
            ),
            evidence={"parameters": [n for n, _ in items][:50], "first_step": step,
                      "relative_change": upd},
            where=[n for n, _ in items][:10],
        )
