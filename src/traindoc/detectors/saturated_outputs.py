"""saturated-outputs: the model's outputs barely depend on the input."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterator, Mapping

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import LOSS_INPUT, Activation, Event, LossOnProbabilities, SingleClass
from traindoc.findings import Finding


class SaturatedOutputs(Detector):
    """On most sampled steps an output hardly varies across the batch (or, for a model run on
    one row a call, across the rows of the step's calls): probabilities (values in
    [0, 1]) with a spread below ``spread`` (e.g. all about 0.5), or any output whose spread
    across the batch is below ``relative`` of its overall spread. Judged over the run, for each
    output on its own: the model's output, and the probabilities a BCE loss sees (the sigmoid of
    the logits handed to ``binary_cross_entropy_with_logits``, or ``binary_cross_entropy``'s
    input), wherever the squashing happens.

    One verdict per output per sampled step, over all its forwards at that step (a GAN's
    discriminator runs three: real, fake, and the generator's fake). A step whose forwards,
    made with the same weights, give batches whose ranges do not overlap shows the output
    depending on its input, however little each batch varies: a discriminator scores an
    all-real batch and an all-fake batch apart, each batch one class, so a small spread within
    each is what it should do, not saturation.

    Each step's verdict counts for the steps of the run it stands for (those since the output's
    previous sampled step): the first steps are all sampled, and where they are an init's
    transient (a DCGAN's N(0, 0.02) weights start a discriminator's logits within 0.002 of 0)
    they would otherwise outvote the rest of a short run. The early verdict, fired as soon as it
    holds, needs a stretch of ``2 * min_steps`` sampled steps in a row saturated, over at least
    ``min_span`` steps and at least half of the run so far: from the start (a head squashed from
    its init), or mid-run (a policy that collapsed to one action).

    An output pinned at exactly 1 in a run whose loss takes a softmax over one class is that
    softmax's constant: single-class-softmax's to report, with its cause. Probabilities in a run
    whose class-index loss takes a softmax's output for logits are cross-entropy-on-probabilities'
    to report: through that loss their gradient is the softmax's p(1 - p) times a bounded term,
    so they stay near the even shares of the init for hundreds of steps (jindongwang's HAR CNN:
    251 steps with every share in [0.16, 0.177]; with ``nll_loss(torch.log(p))`` on the same
    softmax, not saturated)."""

    id = "saturated-outputs"
    needs = frozenset({"activations"})
    uses = frozenset({"single_class", "loss_on_probabilities"})
    examples = (
        Example("zoo/saturated_dag_scale.py", 0),
        Example("zoo/rl_actor_critic_collapse.py", -1),
        Example("zoo/rl_td_actor_critic_collapse.py", -1),
        Example("zoo/healthy_rl_td_actor_critic.py", None),
        Example("zoo/healthy_rl_actor_critic.py", None),
        Example("zoo/healthy_mlp.py", None),
        Example("zoo/healthy_dcgan_normal_init.py", None),
        Example("zoo/vq_ema_codebook_collapse.py", 1),
        Example("zoo/healthy_vq_ema_codebook.py", None),
    )

    # Carried over a resume: each output's counts, recent spreads (deques of 64) and the forwards of
    # the step it is in, and which one fired.
    carry = ("_outputs", "_one_class", "_probabilities")

    @dataclass(frozen=True)
    class Config:
        spread: float = 0.01
        relative: float = 0.01
        share: float = 0.8  # of the steps the sampled ones stand for
        min_steps: int = 10
        min_span: int = 100  # steps an early verdict covers

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._outputs: dict[str, _Output] = {}  # one per output: the model's, the loss's input
        self._fired: _Output | None = None
        self._one_class = False  # the loss took a softmax over one class (single-class-softmax)
        self._probabilities = False  # a class-index loss took a softmax's output (cross-entropy-on-probabilities)

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``carry``; the output that fired by its name)."""
        fired = self._fired.module if self._fired is not None else None
        return {**super().state_dict(), "fired": fired}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        state = dict(state)
        fired = state.pop("fired")
        super().load_state_dict(state)
        self._fired = self._outputs[str(fired)] if fired is not None else None

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, SingleClass):
            self._one_class = self._one_class or event.op == "softmax"
            return
        if isinstance(event, LossOnProbabilities):
            self._probabilities = True
            return
        assert isinstance(event, Activation)
        if not event.is_output or event.spread is None or event.spread != event.spread:
            return
        for before in self._outputs.values():  # a later step: the steps before it are whole
            if before.step is not None and before.step < event.step and self._close(before) \
                    and not self._explained(before):
                yield self._finding(before)
        out = self._outputs.get(event.module)
        if out is None:
            what = (f"the probabilities `{event.module}` sees" if event.type == LOSS_INPUT
                    else f"the output of `{event.module}`")
            out = self._outputs[event.module] = _Output(event.module, what)
        out.step = event.step
        out.forwards.append((self._saturated(event), event.spread, event.lo, event.hi))

    def _close(self, out: _Output) -> bool:
        """Judge ``out``'s step from its forwards; True when that makes the early verdict (every
        sampled step so far saturated, enough of them over enough of the run)."""
        cfg = self.config
        if not out.close() or self._fired is not None or out.stretch is None:
            return False
        _, span, count = out.stretch
        if count >= 2 * cfg.min_steps and span >= cfg.min_span and 2 * span >= out.span:
            self._fired = out
            return True
        return False

    def finish(self) -> Iterator[Finding]:
        cfg = self.config
        for out in self._outputs.values():
            self._close(out)
        if self._fired is not None:
            if not self._explained(self._fired):
                yield self._finding(self._fired)
            return
        for out in self._outputs.values():
            if out.seen >= cfg.min_steps and out.saturated_span >= cfg.share * out.span \
                    and not self._explained(out):
                yield self._finding(out)
                return

    def _explained(self, out: _Output) -> bool:
        """Pinned at exactly 1 by a softmax over one class (single-class-softmax's), or
        probabilities held near their init by a class-index loss that takes them for logits
        (cross-entropy-on-probabilities')."""
        if not out.lo:
            return False
        lo, hi = median(list(out.lo)), median(list(out.hi))
        return (self._one_class and lo == 1.0 == hi) or (self._probabilities and 0.0 <= lo and hi <= 1.0)

    def _saturated(self, a: Activation) -> bool:
        cfg = self.config
        assert a.spread is not None
        bounded = a.lo is not None and a.hi is not None and a.lo >= 0.0 and a.hi <= 1.0
        if bounded and a.spread < cfg.spread:
            return True
        return a.scale is not None and (a.scale == 0 or a.spread < cfg.relative * a.scale)

    def _finding(self, out: _Output) -> Finding:
        lo, hi = median(list(out.lo)), median(list(out.hi))
        spread = median(list(out.spreads))
        pinned = lo <= 0.01 and hi >= 0.99  # probabilities at 0 and 1, not squashed in the middle
        collapsed = lo < 0.0 or hi > 1.0  # not probabilities: the same vector for every input
        start, span, _ = out.longest or (out.first, 0, 0)
        return finding(
            self.id, step=start,
            message=(
                f"{out.what} {'vary' if out.what.startswith('the probabilities') else 'varies'} across inputs by a median {fmt(spread)} (std over "
                f"the batch, or a step's one-row calls; threshold {fmt(self.config.spread)}) on {out.saturated} of {out.seen} "
                f"sampled steps ({out.saturated_span} of the {out.span} steps they stand for; "
                f"the longest stretch {span} steps from step {start}); its values sit in [{fmt(lo)}, {fmt(hi)}]."
            ),
            cause=(f"{out.what[0].upper()}{out.what[1:]} sit at 0 and 1 whatever the input: the "
                   "logits grew so large that the softmax/sigmoid saturated, and its gradient "
                   "vanishes (a policy that collapsed to one action in every state)."
                   if pinned else
                   f"{out.what[0].upper()}{out.what[1:]} is nearly the same vector for every input: a "
                   "collapse. A vector quantizer whose inputs all pick one code (codebook collapse: "
                   "unused codes drift out of reach, as when an EMA codebook divides an unused code's "
                   "sum by a count near 0), a self-supervised representation that collapsed to a "
                   "constant, or a module whose input no longer carries the data."
                   if collapsed else None),
            fix=("Keep the logits bounded: an entropy bonus for a policy (subtract beta * "
                 "entropy from the loss, beta ~0.01), a lower LR or gradient clipping, label "
                 "smoothing or a temperature for a classifier; watch the outputs' entropy."
                 if pinned else
                 "Count the distinct outputs (for a quantizer, the codes in use per batch). For a "
                 "codebook: start an EMA codebook's counts at 1, not 0, re-seed unused codes from "
                 "encoder outputs, or initialise the codebook from them (k-means). For a "
                 "self-supervised model: check the stop-gradient, predictor and variance terms."
                 if collapsed else None),
            evidence={"module": out.module, "median_spread": spread, "low": lo, "high": hi,
                      "saturated_steps": out.saturated, "sampled_steps": out.seen,
                      "saturated_span": out.saturated_span, "span": out.span,
                      "longest_from": start, "longest_span": span},
            where=[out.module],
        )


class _Output:
    """One output's tally over sampled steps, and over the steps of the run they stand for
    (``span``); the forwards of the step it is in (saturated?, spread, low, high); the spreads
    and ranges of its last 64 saturated forwards."""

    def __init__(self, module: str, what: str) -> None:
        self.module = module
        self.what = what
        self.seen = 0
        self.saturated = 0
        self.first: int | None = None
        self.last: int | None = None  # the latest step judged
        self.span = 0
        self.saturated_span = 0
        self.step: int | None = None
        self.forwards: list[tuple[bool, float, float | None, float | None]] = []
        # The saturated stretch going on (first step, steps it stands for, sampled steps) and
        # the longest one: where a collapse mid-run began, not the init's first steps.
        self.stretch: tuple[int, int, int] | None = None
        self.longest: tuple[int, int, int] | None = None
        self.spreads: deque[float] = deque(maxlen=64)
        self.lo: deque[float] = deque(maxlen=64)
        self.hi: deque[float] = deque(maxlen=64)

    def close(self) -> bool:
        """Count the step's verdict (True when there was a step): saturated when every forward
        was and no two forwards' batches sit apart (disjoint ranges, the same weights)."""
        forwards, step = self.forwards, self.step
        self.forwards, self.step = [], None
        if step is None or not forwards:
            return False
        weight = step - self.last if self.last is not None and step > self.last else 1
        self.last = step
        self.seen += 1
        self.span += weight
        ranges = [(lo, hi) for _, _, lo, hi in forwards if lo is not None and hi is not None]
        apart = bool(ranges) and min(hi for _, hi in ranges) < max(lo for lo, _ in ranges)
        if apart or not all(sat for sat, _, _, _ in forwards):
            self.stretch = None
            return True
        self.saturated += 1
        self.saturated_span += weight
        if self.first is None:
            self.first = step
        start, span, count = self.stretch or (step, 0, 0)
        self.stretch = (start, span + weight, count + 1)
        if self.longest is None or self.stretch[1] > self.longest[1]:
            self.longest = self.stretch
        for _, spread, lo, hi in forwards:
            self.spreads.append(spread)
            if lo is not None and hi is not None:
                self.lo.append(lo)
                self.hi.append(hi)
        return True
