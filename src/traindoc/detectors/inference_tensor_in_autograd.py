"""inference-tensor-in-autograd: parameters that ran under inference_mode in a training step get no gradient."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, names, require
from traindoc.events import Event, InferenceForward, ParamStats
from traindoc.findings import Finding


class InferenceTensorInAutograd(Detector):
    """Modules whose parameters an optimizer trains ran their forward inside a
    ``torch.inference_mode()`` region while a training step was built (live, sampled steps),
    and those parameters got no gradient (None or exactly 0) at that step's ``optimizer.step()``.
    Their outputs were inference tensors, which carry no autograd history: whatever the loss
    computes from them (a ``.clone()``, a concatenation, an addition: the spellings torch
    lets through, unlike ``head(t)`` or ``t / T``, which raise "Inference tensors cannot be
    saved for backward") cannot reach them. This is the root of the ``no-gradient`` those
    parameters show, and the finding quotes the ``inference_mode`` call site.

    The same network run under inference_mode to compute a target (a DQN's next-state values)
    while it also runs with gradients gets its gradient and stays quiet; so does a frozen
    encoder under inference_mode whose parameters no optimizer holds."""

    id = "inference-tensor-in-autograd"
    needs = frozenset({"inference_forward"})
    uses = frozenset({"params"})
    examples = (
        Example("zoo/gnn_encoder_under_inference_mode.py", 0),
        Example("zoo/feature_distill_adapter_inference_mode.py", 0),
        Example("zoo/healthy_gnn_frozen_encoder_inference_mode.py", None),
        Example("zoo/healthy_feature_distill_adapter.py", None),
        Example("zoo/healthy_dqn_target_inference_mode.py", None),
    )

    # Carried over a resume: the confirmed steps and the evidence of the first one, and whether it
    # fired.
    carry = ("_confirmed", "_first", "_fired")

    @dataclass(frozen=True)
    class Config:
        confirm: int = 2  # sampled steps on which those parameters got no gradient

        def __post_init__(self) -> None:
            require(self, confirm=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        # step -> (parameters run under inference_mode, their modules, the region's call site)
        self._pending: dict[int, tuple[set[str], list[str], str]] = {}
        self._dry: dict[int, list[str]] = {}  # step -> those parameters that got no gradient
        self._wet: dict[int, set[str]] = {}  # step -> those that did
        self._confirmed = 0
        self._first: dict[str, object] = {}  # evidence of the first confirmed step
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, InferenceForward):
            yield from self._judge_before(event.step)
            params, modules, where = self._pending.setdefault(event.step, (set(), [], event.where))
            params.update(event.params)
            modules.extend(m for m in event.modules if m not in modules and len(modules) < 16)
            return
        assert isinstance(event, ParamStats)
        yield from self._judge_before(event.step)
        pending = self._pending.get(event.step)
        if pending is None or event.name not in pending[0] or event.optimizer < 0 or not event.requires_grad:
            return
        if event.has_grad and event.grad:
            self._wet.setdefault(event.step, set()).add(event.name)
        else:
            self._dry.setdefault(event.step, []).append(event.name)

    def finish(self) -> Iterator[Finding]:
        yield from self._judge_before(1 << 62)

    def _judge_before(self, step: int) -> Iterator[Finding]:
        """Steps before ``step`` have all their parameter statistics in."""
        for s in sorted(k for k in self._pending if k < step):
            params, modules, where = self._pending.pop(s)
            dry = [n for n in self._dry.pop(s, []) if n not in self._wet.get(s, set())]
            self._wet.pop(s, None)
            if not dry:
                continue
            self._confirmed += 1
            if not self._first:
                self._first = {"step": s, "parameters": dry[:50], "modules": modules, "where": where,
                               "under_inference_mode": len(params)}
            if not self._fired and self._confirmed >= self.config.confirm:
                self._fired = True
                yield self._finding()

    def _finding(self) -> Finding:
        first = self._first
        step = first["step"]
        assert isinstance(step, int)
        dry = [str(n) for n in first["parameters"]] if isinstance(first["parameters"], list) else []
        modules = [str(m) for m in first["modules"]] if isinstance(first["modules"], list) else []
        where = str(first["where"])
        at = f" at {where}" if where else ""
        return finding(
            self.id, step=step,
            message=(
                f"{names(modules)} ran under torch.inference_mode(){at} while step {step} was being "
                f"built, and {len(dry)} of its trainable parameter(s) ({names(dry)}) got no gradient "
                f"(None or exactly 0) on {self._confirmed} sampled step(s): its outputs were inference "
                "tensors without autograd history, so the loss computed from them never reaches it."
            ),
            fix=(f"Take the training path out of the inference_mode region{at}: run that module with "
                 "gradients (`with torch.enable_grad():` inside a decorated helper, or call it outside "
                 "the block). If it is meant to stay frozen, use `torch.no_grad()` and leave its "
                 "parameters out of the optimizer."),
            evidence={"parameters": dry, "modules": modules, "inference_mode_at": where,
                      "sampled_steps": self._confirmed, "step": step},
            where=[where] if where else [],
        )
