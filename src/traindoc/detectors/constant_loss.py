"""constant-loss: the loss handed to backward does not depend on the parameters."""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.events import Backward, Event, GradAccumulation, ParamStats, Scalar, SingleClass
from traindoc.findings import Finding


class ConstantLoss(Detector):
    """Steps whose loss gives zero gradient: backward() got a tensor with no autograd history (a
    constant that replaced the loss), or, on a sampled step, every gradient came out exactly
    zero (a clamp or ``torch.where`` that cut the graph).

    Also a loss whose graph reaches no parameter at all: rebuilt from a thresholded prediction
    as a new leaf (``torch.tensor(pred > 0.5, requires_grad=True)`` handed to the loss function),
    so backward() runs and fills only that leaf's gradient. Measured live right after each
    backward() of a sampled step: every optimizer's gradient norm is 0 (the gradients stay
    None), on ``confirm`` sampled steps, while the optimizers hold trainable parameters and none
    of them had a gradient on any sampled step of the run (neither after backward() nor at
    ``step()``: an embedding's sparse gradient, which the norms leave out, counts). A run where another optimizer's
    parameters do get gradients (a GAN's discriminator) is no-gradient's to judge, and one where
    parameters no optimizer holds get them (an optimizer built before the model's parameters
    were replaced) optimizer-param-mismatch's, and a step whose loss took a softmax over one class
    (its gradient is 0 by construction) single-class-softmax's.

    From a log (no backward measured): a loss logged as exactly 0 at every one of at least
    ``zeros`` points, from the first one. No model starts at a loss of 0; a loss that is 0 from
    its first step does not depend on the model (a cross-entropy over one class, a loss masked
    to nothing). A loss that reaches 0 later (a small dataset fitted, printed at 4 decimals)
    is not judged."""

    id = "constant-loss"
    uses = frozenset({"backward", "params", "accumulation", "single_class", "loss"})
    examples = (
        Example("demo_scripts/nan_masked_loss.py", 0),
        Example("zoo/clamped_loss.py", 0),
        Example("zoo/unet_dice_thresholded_leaf.py", 0),
        Example("zoo/recsys_rounded_rating_leaf.py", 0),
        Example("zoo/healthy_unet_soft_dice.py", None),
        Example("zoo/healthy_recsys_sparse_embeddings.py", None),
        Example("zoo/fsdp2_optimizer_before_shard.py", None),  # its parameters do get gradients
        Example("golden/constant_loss.jsonl", 5),
        Example("fixtures/logs/meaning/loss_zero_from_start.csv", 0),
        Example("fixtures/logs/meaning/healthy_loss_reaches_zero.csv", None),
        Example("golden/healthy_noisy_loss.jsonl", None),
    )

    # Carried over a resume: the recent steps' losses, the counts of flagged steps, their values and
    # call sites (all bounded), and the sampled steps still to judge.
    carry = ("_recent", "_values", "_sites", "_constant", "_zero_grad", "_last_constant", "_first",
                "_grad_sq", "_with_grad", "_steps", "_sampled", "_dry", "_dry_first", "_reached",
                "_trainable", "_dry_fired", "_one_class", "_zeros", "_zero_first", "_nonzero")

    @dataclass(frozen=True)
    class Config:
        confirm: int = 5  # sampled steps whose backward reached no parameter, before firing
        zeros: int = 20  # logged points, all exactly 0 from the first, before a log's loss fires

        def __post_init__(self) -> None:
            require(self, confirm=">= 1", zeros=">= 2")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._dry = 0  # sampled optimizer steps whose every backward() left its gradients at 0
        self._dry_first: list[int] = []  # their first steps (at most 20)
        self._reached = False  # some optimizer's gradient norm was > 0 after a backward()
        self._trainable = False  # an optimizer holds parameters with requires_grad
        self._dry_fired = False
        self._one_class: set[int] = set()  # sampled steps still to judge whose loss is over one class
        # The logged loss (judged only where no backward was measured): points exactly 0 so far
        self._zeros = 0
        self._zero_first: int | None = None
        self._nonzero = False  # a finite point that is not 0: the loss depends on something
        # Bounded however long the run: the backward() of the last _RECENT steps (the value and
        # call site of its last call, whether any call got a constant, whether the step was
        # flagged); a flagged step that leaves it adds its value to _values and its site to
        # _sites. Steps arrive in order, so a sampled step is judged while still in _recent.
        self._recent: dict[int, tuple[float, str, bool, bool]] = {}
        self._values: Counter[float] = Counter()  # rounded values of the flagged steps that left
        self._sites: set[str] = set()
        self._constant = 0  # steps on which backward() got a constant
        self._zero_grad = 0  # sampled steps on which every gradient was 0
        self._last_constant: int | None = None
        self._first: list[int] = []  # the first 20 flagged steps, in order
        self._grad_sq: dict[int, float] = {}
        self._with_grad: Counter[int] = Counter()
        self._steps = 0
        self._sampled = 0

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Scalar):
            if event.name == "loss" and event.value == event.value and not self._nonzero:
                if event.value == 0.0:
                    self._zeros += 1
                    self._zero_first = event.step if self._zero_first is None else self._zero_first
                else:
                    self._nonzero = True
            return
        if isinstance(event, Backward):
            old = self._recent.get(event.step)
            if old is None:
                self._steps += 1
                self._remember()
            constant = event.constant or (old is not None and old[2])
            self._recent[event.step] = (event.value, event.where, constant, old is not None and old[3])
            if event.constant and self._last_constant != event.step:
                self._last_constant = event.step
                self._constant += 1
                self._flag(event.step)
                yield self._finding()
            yield from self._close_before(event.step)
            return
        if isinstance(event, GradAccumulation):
            yield from self._after_backward(event)
            return
        if isinstance(event, SingleClass):
            self._one_class.add(event.step)
            return
        assert isinstance(event, ParamStats)
        if event.optimizer < 0 and event.has_grad:  # a model's parameter no optimizer holds got
            self._reached = True  # one: the graph reaches parameters (optimizer-param-mismatch's)
        if event.optimizer >= 0 and event.requires_grad:
            if event.has_grad:  # a gradient arrived (a sparse one too, which the norms skip)
                self._reached = True
            if not self._trainable:
                self._trainable = True
                yield from self._judge_dry()
        if event.optimizer < 0 or not event.requires_grad or not event.has_grad or event.grad is None:
            return
        self._grad_sq[event.step] = self._grad_sq.get(event.step, 0.0) + event.grad ** 2
        self._with_grad[event.step] += 1

    def finish(self) -> Iterator[Finding]:
        yield from self._close_before(1 << 62)
        if not self._steps and not self._nonzero and self._zeros >= self.config.zeros:
            yield self._logged_zero()

    def _logged_zero(self) -> Finding:
        first = self._zero_first or 0
        return finding(
            self.id, step=first,
            message=(f"The logged loss is exactly 0 at all {self._zeros} points, from the first one "
                     f"(step {first}): no model starts at a loss of 0, so this loss does not depend "
                     "on the model, and its gradient is 0."),
            cause=_ZERO_CAUSE, fix=_ZERO_FIX,
            evidence={"zero_points": self._zeros, "first_step": first},
        )

    def _after_backward(self, e: GradAccumulation) -> Iterator[Finding]:
        """An optimizer's gradient norms right after each backward() of a sampled step."""
        norms = [n for n in e.norms if n == n]  # NaN: unknown, not zero
        if not norms or e.backwards < 1:
            return
        if any(n != 0.0 for n in norms):
            self._reached = True
            return
        self._dry += 1
        if len(self._dry_first) < 20:
            bisect.insort(self._dry_first, e.step)
        yield from self._judge_dry()

    def _judge_dry(self) -> Iterator[Finding]:
        if (self._dry_fired or self._reached or not self._trainable
                or self._dry < self.config.confirm):
            return
        self._dry_fired = True
        for step in self._dry_first:
            self._flag(step)
        yield self._finding()

    def _close_before(self, step: int) -> Iterator[Finding]:
        """Judge the sampled steps before ``step``: all their events have arrived."""
        for s in sorted(k for k in self._with_grad if k < step):
            del self._with_grad[s]  # judged once; keeps this loop short on long runs
            self._sampled += 1
            known = self._recent.get(s)
            one_class = s in self._one_class
            self._one_class.discard(s)
            if self._grad_sq.pop(s, 0.0) == 0.0 and not (known is not None and known[2]) and not one_class:
                self._zero_grad += 1
                self._flag(s)
                yield self._finding()
        if self._one_class:  # a step whose gradients never came: judged by now
            self._one_class = {s for s in self._one_class if s >= step}

    def _flag(self, step: int) -> None:
        known = self._recent.get(step)
        if known is not None:
            self._recent[step] = (*known[:3], True)
        if step not in self._first:
            bisect.insort(self._first, step)
            del self._first[20:]

    def _remember(self) -> None:
        """Make room in _recent for a new step: the oldest leaves, its value counted if flagged."""
        if len(self._recent) < _RECENT:
            return
        step = next(iter(self._recent))
        value, where, _, flagged = self._recent.pop(step)
        if flagged:
            key = _key(value)
            if key in self._values or len(self._values) < _VALUES:
                self._values[key] += 1
            if where and len(self._sites) < _VALUES:
                self._sites.add(where)

    def _finding(self) -> Finding:
        first = self._first[0]
        values, sites = Counter(self._values), set(self._sites)
        for v, site, _, flagged in self._recent.values():  # in step order, as the counts
            if flagged:
                values[_key(v)] += 1
                if site:
                    sites.add(site)
        common = values.most_common(1)[0] if values else None
        parts = []
        if self._constant:
            parts.append(f"on {self._constant} of {self._steps} steps backward() got a tensor with no autograd history")
        if self._zero_grad:
            parts.append(f"on {self._zero_grad} of {self._sampled} sampled steps every gradient was exactly 0")
        if self._dry_fired:
            parts.append(
                f"on {self._dry} sampled optimizer steps every backward() left the parameters of every "
                "optimizer without a gradient (gradient norm 0 right after it), and no parameter got "
                "one on any sampled step: the loss's graph reaches no parameter")
        nan = common is not None and math.isnan(common[0]) and not self._dry_fired
        value = f"; the value handed to backward was {fmt(common[0])} on {common[1]} of them" if common else ""
        return finding(
            self.id, step=first,
            message="; ".join(parts) + value + f" (first at step {first}).",
            cause=(_UNREACHED if self._dry_fired and not (self._constant or self._zero_grad)
                   else _NAN_CAUSE if nan else None),
            fix=_NAN_FIX if nan else None,
            evidence={"constant_steps": self._constant, "zero_gradient_steps": self._zero_grad,
                      "unreached_steps": self._dry,
                      "steps_observed": self._steps, "first_steps": list(self._first),
                      "value_to_backward": common[0] if common else None},
            where=sorted(sites),
        )


_UNREACHED = (
    "The loss was rebuilt outside the model's graph: a thresholded or rounded prediction "
    "(`(probs > 0.5).float()`, `argmax`, `.round()`), a `.item()`/`.numpy()` round trip, or "
    "`torch.tensor(pred, requires_grad=True)` made a new leaf; backward() fills that leaf's "
    "gradient and stops there. The `requires_grad=True` was likely added to silence \"element 0 "
    "of tensors does not require grad\".")
_NAN_CAUSE = (
    "The value handed to backward was NaN, so its steps learned nothing: the root cause is where "
    "that NaN was born, which `nonfinite` names (an empty batch, an op outside its domain).")
_NAN_FIX = "Fix the NaN where `nonfinite` says it was born: a loss that is NaN trains nothing."
_ZERO_CAUSE = (
    "A loss that is 0 from its first step is a constant of the code, not of the data: most often "
    "a cross-entropy over one class (`F.cross_entropy` on a model with one output, whose "
    "log_softmax is 0 for every row; single-class-softmax), or a loss masked or weighted to "
    "nothing (every label ignored, a weight of 0).")
_ZERO_FIX = (
    "Run the script under `traindoc run` to see which: it names the layer and the line. For one "
    "output, use `F.mse_loss` (values) or `F.binary_cross_entropy_with_logits` (a binary target), "
    "or give the last layer one output per class.")
_NAN = math.nan  # one NaN key for the counts: NaN != NaN would count each NaN apart


def _key(value: float) -> float:
    return _NAN if math.isnan(value) else round(value, 6)


_RECENT = 64  # steps whose backward() is kept until they leave (a sampled step is judged sooner)
_VALUES = 1024  # distinct values counted (and call sites kept): a constant repeats one value
