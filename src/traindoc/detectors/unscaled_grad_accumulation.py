"""unscaled-grad-accumulation: several micro-batches accumulate into one optimizer step but the
loss is not divided by their number."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, is_adaptive, require
from traindoc.detectors._maths import Head
from traindoc.events import Event, GradAccumulation
from traindoc.findings import Finding


class UnscaledGradAccumulation(Detector):
    """An optimizer steps after N >= 2 micro-batch backward() calls, and each call got the loss
    as the loss function computed it: the autograd graph shows no division by a constant between
    the two (``scale`` times N is ``min_factor`` or more). The accumulated gradient is then the
    sum of the micro-batch gradients, not their mean.

    Micro-batches are recognised by what the run shows, wherever the data comes from: N
    DataLoader batches drawn for N backward() calls, or N backward() calls all made from one
    line of code (a loop over ``get_batch()``, over slices of one tensor, or a helper called per
    micro-batch) whose gradients add up (the norm after the last is ``growth`` times the
    first's or more: N micro-batches give sqrt(N) to N times). Not accumulation, not judged: backward() calls from different lines on one
    batch (a multi-term loss, a GAN's real and fake terms), calls that keep the graph
    (``retain_graph=True``: terms of one loss), calls each made on cleared gradients (LBFGS's
    closure evaluations: none accumulates), steps where another optimizer stepped in
    between, and calls with no forward of the model between them after a first that had them
    (a rollout's per-time-step terms of one objective, summed on purpose: REINFORCE's
    return-weighted log-probabilities backpropagated one by one). Nor a sum the script divides by N
    itself between the last backward() and the step (the step's gradient norm is 1/N of the
    last backward's: learn2learn's MAML, ``p.grad.data.mul_(1.0 / meta_batch_size)``). Needs
    sampled steps (live)."""

    id = "unscaled-grad-accumulation"
    needs = frozenset({"accumulation"})
    examples = (
        Example("zoo/unscaled_accumulation.py", 0),
        Example("zoo/healthy_accumulation.py", None),
        Example("zoo/healthy_gpt.py", None),
        Example("zoo/healthy_rl_reinforce_term_backwards.py", None),
        Example("zoo/healthy_maml_grads_averaged.py", None),
        Example("zoo/healthy_accumulation_grads_divided.py", None),
        Example("live/golden/unscaled_accumulation.jsonl", 0),
        Example("live/golden/healthy_accumulation.jsonl", None),
    )

    # Carried over a resume: the steps that showed it (how many, the first 10; counts towards
    # confirm) and the steps judged.
    carry = ("_hits", "_judged", "_fired")

    @dataclass(frozen=True)
    class Config:
        confirm: int = 2  # sampled steps showing it before firing
        min_factor: float = 2.0  # scale x micro-batches: the gradient is this many means
        growth: float = 1.3  # accumulated/first micro-batch norm that shows gradients adding up

        def __post_init__(self) -> None:
            require(self, confirm=">= 1", min_factor="> 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._hits: Head[GradAccumulation] = Head(10)  # steps that showed it: how many, the first 10
        self._judged = 0
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, GradAccumulation)
        e = event
        # One line's backward() calls whose gradients add up (the norm grows from the first
        # micro-batch's): an LBFGS closure clears them on each call and they do not.
        grows = len(e.norms) >= 2 and e.norms[0] > 0 and e.norms[-1] >= self.config.growth * e.norms[0]
        one_loop = e.sites == 1 and not e.retained and grows
        if e.interleaved or e.restarted or e.rollout or e.backwards < 2 or not math.isfinite(e.scale) \
                or not (e.batches == e.backwards or one_loop):
            return
        self._judged += 1
        if e.scale * e.backwards < self.config.min_factor or _divided_after(e):
            return
        self._hits.append(e)
        if not self._fired and self._hits.count >= self.config.confirm:
            self._fired = True
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._fired:
            yield self._finding()  # final evidence: how many steps showed it

    def _finding(self) -> Finding:
        e = self._hits.items[0]
        n = e.backwards
        norms = list(e.norms)
        ratio = norms[-1] / norms[0] if len(norms) >= 2 and norms[0] > 0 else math.nan
        series = " -> ".join(fmt(x) for x in norms[:8]) + (" ..." if len(norms) > 8 else "")
        scaled = ("as computed (not divided)" if e.scale == 1.0
                  else f"multiplied by {fmt(e.scale)}, not by 1/{n}")
        growth = (f"; the gradient norm grew {series} over the micro-batches, {fmt(ratio)}x that of a "
                  f"single micro-batch" if math.isfinite(ratio) else "")
        where = f" at {e.backward_where}" if e.backward_where else ""
        source = (f"{e.batches} DataLoader batches" if e.batches == n
                  else "micro-batches from one line of code")
        return finding(
            self.id, step=e.step,
            message=(
                f"{e.cls}.step() at step {e.step} applied {n} accumulated micro-batch gradients: "
                f"{n} backward() calls on {source}, each handed the loss "
                f"{scaled}{where}{growth}. The step uses the sum of the {n} gradients, "
                f"{fmt(e.scale * n)}x their mean (seen on {self._hits.count} of {self._judged} "
                f"sampled accumulation steps; threshold {fmt(self.config.min_factor)}x)."
            ),
            cause=(
                f"The loss of each micro-batch is not divided by the number of micro-batches ({n}), "
                "so the gradients add up instead of averaging. " + (
                    f"{e.cls} divides its update by the gradients' running size, so its step barely "
                    f"changes; what sees {n}x the norm is clip_grad_norm_ (a limit tuned for one batch "
                    f"clips {n}x harder), gradient-norm logging, an L2 weight_decay added to the "
                    "gradient (its share shrinks) and the optimizer's eps."
                    if is_adaptive(e.cls) else
                    f"With {e.cls} at lr {fmt(e.lr)} the update is about {n}x what one batch of the "
                    f"same total size gives: the effective LR is {fmt(e.lr * n)}.")
            ),
            fix=(
                f"Divide before backward{where}: `loss = loss / {n}` (your accumulation steps), then "
                "`loss.backward()`. If micro-batches differ in size, divide by the total number of "
                "samples or tokens of the accumulated batch. If the summed gradient is intended, "
                + ("silence this id (and scale any clipping limit by it)." if is_adaptive(e.cls) else
                   f"lower the LR by {n}x and silence this id.")
            ),
            evidence={
                "micro_batches": n, "batches": e.batches, "loss_scale": e.scale,
                "norms_per_micro_batch": norms, "growth_vs_single": ratio,
                "optimizer": e.cls, "lr": e.lr, "steps_seen": self._hits.count,
                "accumulation_steps_judged": self._judged, "first_steps": [h.step for h in self._hits.items],
            },
            where=[w for w in (e.backward_where, e.where) if w],
        )


def _divided_after(e: GradAccumulation) -> bool:
    """The script divided the summed gradients by N between the last backward() and the step
    (learn2learn's MAML: ``p.grad.mul_(1 / meta_batch_size)``): the step used 1/N of the norm
    the last backward left, within 2%. A clipping that happens to land there is not told apart."""
    last = e.norms[-1] if e.norms else 0.0
    return last > 0 and math.isfinite(e.stepped) and abs(e.stepped * e.backwards / last - 1) < 0.02
