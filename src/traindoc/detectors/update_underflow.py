"""update-underflow: low-precision parameters whose optimizer updates round away."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names, require
from traindoc.detectors._maths import Thinned, median
from traindoc.events import Event, ParamStats
from traindoc.findings import Finding

LOW = ("torch.bfloat16", "torch.float16")
_PER_PARAM = 64  # sampled steps kept per parameter (evenly spread): the median of each


class UpdateUnderflow(Detector):
    """bf16/fp16 parameters where an optimizer step left elements bit-identical although their
    gradient was non-zero: the update is smaller than half the dtype's spacing at the weights'
    magnitude and rounds away. A sampled step counts when the share of such elements (by
    element count) is at least ``share``, or when some parameter was left entirely unchanged
    by an optimizer step measured below half its spacing (the update/spacing measure itself:
    the norm gains of a bf16 transformer at 1.0 never move under AdamW's 1e-3, however few
    elements they are). Fires after ``confirm`` such sampled steps."""

    id = "update-underflow"
    needs = frozenset({"params"})
    examples = (
        Example("demo_scripts/bf16_master.py", 0),
        Example("ckpt/golden/bf16_norms_frozen_diff.jsonl", -1),
        Example("demo_scripts/healthy_bf16_autocast.py", None),
        Example("ckpt/golden/complete_training.jsonl", None),
    )

    # Carried over a resume: the step being gathered, the bad steps (count, bounded samples of their
    # shares), each parameter's unchanged shares (bounded samples) and the spacing and intended
    # steps.
    carry = ("_step", "_acc", "_first_bad", "_bad_steps", "_bad_shares", "_per_param", "_dtype",
                "_spacing", "_intended", "_fired", "_span", "_bad_weight", "_diff_stuck", "_stuck_now")

    @dataclass(frozen=True)
    class Config:
        share: float = 0.3
        confirm: int = 3

        def __post_init__(self) -> None:
            require(self, share="(0, 1]")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._step: int | None = None
        self._acc = [0.0, 0.0]  # unchanged elements, elements (this step)
        # Bounded samples (Thinned: exact up to their cap) however many steps are sampled.
        self._first_bad: int | None = None  # the first bad step
        self._bad_steps = 0
        self._bad_shares = Thinned(256)  # each bad step's unchanged share
        self._per_param: dict[str, Thinned] = {}  # unchanged share per parameter and step
        self._dtype = ""
        self._spacing = Thinned()
        self._intended = Thinned()
        self._fired = False
        self._span = 1
        self._bad_weight = 0
        self._diff_stuck: list[str] = []
        self._stuck_now = False  # a parameter of this step rounded its whole update away

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, ParamStats)
        if event.step != self._step:
            yield from self._judge()
            self._step, self._acc = event.step, [0.0, 0.0]
        if event.dtype not in LOW or event.unchanged is None or event.optimizer < 0:
            return
        if event.has_grad is False or not event.requires_grad:
            return
        self._dtype = event.dtype
        self._acc[0] += event.unchanged * event.numel
        self._acc[1] += event.numel
        self._span = max(self._span, event.steps)
        below = (event.intended is not None and event.spacing is not None
                 and event.intended < event.spacing / 2)  # the optimizer's step rounds away
        if event.has_grad is None and event.unchanged >= 0.99 and below:
            # A checkpoint diff: bit-identical over all its steps, and the optimizer's step is
            # below half the spacing: underflow, judged per parameter (others may move).
            self._diff_stuck.append(event.name)
        elif event.has_grad and event.unchanged >= 0.99 and below:
            # Live: a parameter with a gradient left bit-identical by a step smaller than half
            # its spacing (bf16 norm gains at 1.0 under AdamW's 1e-3), however few elements
            # it holds next to the rest of the model.
            self._stuck_now = True
        per_param = self._per_param.get(event.name)
        if per_param is None:
            per_param = self._per_param[event.name] = Thinned(_PER_PARAM)
        per_param.append(event.unchanged)
        # The step and the spacing quoted are those of the parameters that mostly stayed put:
        # over all of them, the many small biases (spacing 1e-6 near 0) would hide the weights
        # whose updates round away.
        if event.unchanged >= 0.5 and event.spacing is not None and event.spacing == event.spacing:
            self._spacing.append(event.spacing)
            if event.intended is not None:
                self._intended.append(event.intended)

    def finish(self) -> Iterator[Finding]:
        yield from self._judge()
        if self._fired:
            yield self._finding()

    def _judge(self) -> Iterator[Finding]:
        unchanged, total = self._acc
        span, self._span, self._acc = self._span, 1, [0.0, 0.0]
        if total == 0 or self._step is None:
            return
        share = unchanged / total
        stuck, self._stuck_now = self._stuck_now, False
        if share >= self.config.share or self._diff_stuck or stuck:
            if self._first_bad is None:
                self._first_bad = self._step
            self._bad_steps += 1
            self._bad_shares.append(share)
            self._bad_weight += span  # a checkpoint diff confirms over its whole span
            if not self._fired and self._bad_weight >= self.config.confirm:
                self._fired = True
                yield self._finding()

    def _finding(self) -> Finding:
        shares = self._bad_shares.values
        medians = {n: median(t.values) for n, t in self._per_param.items()}
        worst = sorted(self._per_param, key=lambda n: -medians[n])
        stuck = [n for n in worst if medians[n] >= 0.99] or self._diff_stuck
        sp, want = median(self._spacing.values), median(self._intended.values)
        size = (f" For the parameters left mostly unchanged, the optimizer's typical step is about {fmt(want)} "
                f"per element, against a {self._dtype.split('.')[-1]} spacing of {fmt(sp)} at their typical "
                "magnitude.") \
            if self._intended.count and self._spacing.count else ""
        return finding(
            self.id, step=self._first_bad,
            message=(
                f"{self._dtype} parameters: on {self._bad_weight} steps a median "
                f"{median(shares):.0%} of elements" + ("" if self._diff_stuck else " with a non-zero gradient")
                + f" were left bit-identical by the optimizer (threshold {self.config.share:.0%}, or a "
                "parameter that never changed although its optimizer step is below half the spacing)."
                + (f" Never changed: {names(stuck, 4)}." if stuck else "") + size
            ),
            evidence={"dtype": self._dtype, "median_unchanged_share": median(shares),
                      "steps": self._bad_steps, "spacing": sp if self._spacing.count else None,
                      "intended_update": want if self._intended.count else None, "never_changed": stuck[:20]},
            where=(stuck or worst)[:10],
        )
