"""step-no-op: an optimizer's step() stopped changing the parameters it holds, although they
receive gradients and its learning rate is above zero."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names, require
from traindoc.events import Event, Optimizer, ParamStats
from traindoc.findings import Finding

FP32_EPS = 2.0 ** -23  # relative spacing of float32 (fp64 is finer: no rounding concern there)


class StepNoOp(Detector):
    """On a sampled step that took effect, every parameter of an optimizer that has a non-zero
    gradient and a learning rate above 0 is bit-identical after ``step()``, after earlier
    sampled steps where the same optimizer did move its parameters. Judged step by step (not
    last against first), so a step that becomes a no-op mid-run (a cached or compiled step
    that stopped applying updates, a custom optimizer that skips its parameters) is caught at
    the first sampled step it shows.

    Not judged: parameters whose intended update is under 4x the float32 spacing at their
    size (they round away: ``update-underflow``/``tiny-updates``), low-precision parameters
    (``update-underflow``), steps skipped by a GradScaler (they are not measured), a
    learning rate of 0 (warmup from 0, a schedule at its end), parameters without gradient,
    and optimizers whose step re-evaluates the closure it is handed (LBFGS's line search):
    such a step applies no update once its own convergence test passes (the directional
    derivative under ``tolerance_change``), which is the end of its work, not a broken step.
    A closure evaluated once a step (Lightning hands every optimizer one) does not count.
    """

    id = "step-no-op"
    needs = frozenset({"params"})
    uses = frozenset({"optimizer"})
    examples = (
        Example("zoo/step_no_op_cached.py", 11),
        Example("zoo/healthy_cached_step.py", None),
        Example("zoo/lr_zero_warmup.py", None),
        Example("zoo/healthy_gan.py", None),
        Example("zoo/healthy_amp_fp16_skips.py", None),
    )

    # Carried over a resume: the optimizers seen moving their parameters, the no-op steps per
    # optimizer (counts towards confirm, the first 20) and the step being gathered.
    carry = ("_cls", "_reevaluating", "_moved", "_step", "_still", "_changed", "_no_ops", "_count")

    @dataclass(frozen=True)
    class Config:
        confirm: int = 1  # no-op sampled steps before firing

        def __post_init__(self) -> None:
            require(self, confirm=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._cls: dict[int, str] = {}
        self._reevaluating: set[int] = set()  # optimizers whose step re-evaluates its closure
        self._moved: set[int] = set()  # optimizers seen moving their parameters
        self._step: tuple[int, int] | None = None  # (step, optimizer) being gathered
        self._still: list[ParamStats] = []  # judged parameters left unchanged on it
        self._changed = False  # a judged parameter changed on it
        self._no_ops: dict[int, list[int]] = {}  # optimizer -> its first 20 no-op steps
        self._count: dict[int, int] = {}  # optimizer -> no-op steps in all
        self._fired: Finding | None = None

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Optimizer):
            self._cls[event.index] = event.cls
            if event.reevaluates:
                self._reevaluating.add(event.index)
            return
        assert isinstance(event, ParamStats)
        if event.steps != 1 or event.optimizer < 0:
            return
        key = (event.step, event.optimizer)
        if key != self._step:
            yield from self._judge()
            self._step, self._still, self._changed = key, [], False
        if not self._judged(event):
            return
        if event.update == 0.0:
            self._still.append(event)
        else:
            self._changed = True

    def finish(self) -> Iterator[Finding]:
        yield from self._judge()
        if self._fired is not None:
            yield self._fired

    def _judged(self, p: ParamStats) -> bool:
        if not p.has_grad or not p.grad or not math.isfinite(p.grad) or p.update is None:
            return False
        if p.lr is None or not p.lr > 0 or p.dtype in ("torch.bfloat16", "torch.float16"):
            return False
        if p.intended is not None and p.numel and math.isfinite(p.norm):
            rms = p.norm / math.sqrt(p.numel)
            if p.intended < 4 * FP32_EPS * rms:  # would round away in fp32 anyway
                return False
        return True

    def _judge(self) -> Iterator[Finding]:
        if self._step is None:
            return
        step, opt = self._step
        self._step = None
        if self._changed:
            self._moved.add(opt)
            return
        if not self._still or opt not in self._moved or opt in self._reevaluating:
            return
        steps = self._no_ops.setdefault(opt, [])
        if len(steps) < 20:
            steps.append(step)
        self._count[opt] = self._count.get(opt, 0) + 1
        if self._count[opt] >= self.config.confirm and (self._fired is None or self._fired.evidence.get("optimizer") == opt):
            first = self._fired is None
            self._fired = self._finding(opt, steps, self._count[opt], self._still)
            if first:
                yield self._fired

    def _finding(self, opt: int, steps: list[int], count: int, still: list[ParamStats]) -> Finding:
        cls = self._cls.get(opt, "the optimizer")
        grads = [p.grad for p in still if p.grad is not None]
        lrs = sorted({p.lr for p in still if p.lr is not None})
        shown = steps[:5]
        return finding(
            self.id, step=steps[0],
            message=(
                f"{cls}.step() left all {len(still)} of its parameters with a gradient bit-identical "
                f"on {count} sampled step(s) from step {steps[0]} ({', '.join(map(str, shown))}"
                f"{' ...' if count > 5 else ''}), after moving them on earlier steps: gradient "
                f"norms up to {fmt(max(grads))}, LR {', '.join(fmt(x) for x in lrs[:3])}. Unchanged: "
                f"{names([p.name for p in still], 4)}."
            ),
            cause=(f"{cls}.step() runs but applies no update: a step function that caches the "
                   "parameters or buffers it updates (and rebuilt the cache on a step without "
                   "gradients), a custom optimizer skipping its parameters, or a compiled step "
                   "whose graph stopped matching the parameters."),
            evidence={"optimizer": opt, "class": cls, "no_op_steps": steps[:20],
                      "parameters": [p.name for p in still[:20]], "max_grad_norm": max(grads),
                      "lr": lrs[:5]},
            where=[p.name for p in still[:10]],
        )
