"""bad-initial-loss: a classifier's first loss far above ln(C)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt
from traindoc.events import Classification, Event
from traindoc.findings import Finding


class BadInitialLoss(Detector):
    """The first cross-entropy of a fresh classifier should be about ln(C) (uniform predictions
    over C classes); ``nll_loss`` of log-probabilities (``log_softmax`` first) is one too. Only a first loss far *above* it fires (a confidently wrong init); a loss
    below it is normal when training resumes or fine-tunes.

    A contrastive loss whose logits a learnable scale multiplies (CLIP's
    ``logit_scale.exp() * img @ txt.T``, initialised at 1/0.07 = 14.3; a learnable temperature
    ``sim / tau``) starts above ln(C) by design: its logits are cosine similarities in [-1, 1]
    times the scale, so its first loss may be up to ln(C) + 2 * scale. Such a loss is judged
    against that bound (live measures the scale at step 0); only a loss above it (features
    that are not normalised, so the scale alone does not explain it) fires."""

    id = "bad-initial-loss"
    needs = frozenset({"classification"})
    examples = (
        Example("zoo/bad_init_scaled_head.py", 0),
        Example("zoo/bad_init_gcn_log_softmax.py", 0),  # F.nll_loss of log_softmax
        Example("zoo/healthy_mnist_style_nll.py", None),
        Example("zoo/healthy_mlp.py", None),
        Example("zoo/healthy_gpt.py", None),
        Example("zoo/healthy_clip_logit_scale.py", None),
        Example("zoo/healthy_dual_encoder_learnable_temperature.py", None),
    )

    # Carried over a resume: whether the first loss was judged already: a resumed run's first loss
    # is not the initial one.
    carry = ("_done",)

    @dataclass(frozen=True)
    class Config:
        margin: float = 1.0  # absolute nats above ln(C) ...
        relative: float = 0.5  # ... or this share of ln(C), whichever is larger

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._done = False

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, Classification)
        if self._done:
            return
        self._done = True
        if event.classes < 2 or event.step > 0:
            return
        expected = math.log(event.classes)
        limit = expected + max(self.config.margin, self.config.relative * expected)
        scaled = ""
        if event.scale is not None and math.isfinite(event.scale):
            # Unit-norm features: logits in [-scale, scale], so a first loss up to 2 * scale
            # above chance is the scale's doing, not the init's.
            limit += 2.0 * abs(event.scale)
            scaled = (f" A learnable scale of {fmt(event.scale)} multiplies the logits, which allows "
                      f"up to {fmt(2.0 * abs(event.scale))} more for similarities in [-1, 1]: the "
                      "features it scales are not normalised.")
        if event.value <= limit:
            return
        yield finding(
            self.id, step=event.step,
            message=(
                f"the first cross-entropy is {fmt(event.value)} for {event.classes} classes; a fresh "
                f"classifier should start near ln({event.classes}) = {fmt(expected)} (threshold "
                f"{fmt(limit)})." + scaled
            ),
            evidence={"loss": event.value, "classes": event.classes, "expected": expected, "threshold": limit,
                      "logit_scale": event.scale},
        )
