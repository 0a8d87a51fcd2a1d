"""norm-eps-too-large: a normalization layer's eps is as large as the variance it divides by."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names, require
from traindoc.events import Event, NormInput
from traindoc.findings import Finding


class NormEpsTooLarge(Detector):
    """A normalization layer built with ``eps`` of at least ``min_eps`` whose input's variance
    (what it divides by before adding eps: per channel for a BatchNorm, per row for a LayerNorm)
    is at most that eps, in median, on ``confirm`` sampled steps. The layer then divides by
    sqrt(var + eps) >= sqrt(2 var): its output's standard deviation is sqrt(var / (var + eps)),
    at most 0.71 where 1 was meant, and far less when eps dominates (a DCGAN discriminator's
    ``BatchNorm2d(C, 0.8)`` on activations of variance 1e-4: 0.011). A large eps that stays small
    next to the measured variance is not judged a failure. One finding for the run, naming every
    such layer; its step is the first sampled step where one was."""

    id = "norm-eps-too-large"
    needs = frozenset({"norms"})
    examples = (
        Example("zoo/norm_eps_as_momentum_gan.py", 0),
        Example("zoo/norm_eps_channel_count.py", 0),
        Example("zoo/healthy_bn_momentum_keyword_gan.py", None),
        Example("zoo/healthy_cnn_bn.py", None),
    )

    # Carried over a resume: per layer, its class and eps, the sampled steps where eps dominated,
    # the first of them and the latest variance; whether it fired.
    carry = ("_cls", "_eps", "_count", "_first", "_var", "_where", "_fired")

    @dataclass(frozen=True)
    class Config:
        min_eps: float = 0.01  # 1000x PyTorch's default eps, 10x Keras's
        confirm: int = 3  # sampled steps with eps >= the variance, per layer

        def __post_init__(self) -> None:
            require(self, min_eps="> 0", confirm=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._cls: dict[str, str] = {}  # by the layer's name
        self._eps: dict[str, float] = {}
        self._count: dict[str, int] = {}
        self._first: dict[str, int] = {}
        self._var: dict[str, float] = {}
        self._where: dict[str, str] = {}  # where the layer was built, when known
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, NormInput)
        if event.eps < self.config.min_eps or not 0 <= event.var <= event.eps:  # NaN too
            return
        name = event.module
        self._cls[name], self._eps[name], self._var[name] = event.cls, event.eps, event.var
        if event.where:
            self._where[name] = event.where
        self._count[name] = self._count.get(name, 0) + 1
        self._first.setdefault(name, event.step)
        if not self._fired and self._count[name] >= self.config.confirm:
            self._fired = True
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._fired:
            yield self._finding()  # final evidence: every layer seen by the end

    def _finding(self) -> Finding:
        bad = [n for n, count in self._count.items() if count >= self.config.confirm]
        first = min(self._first[n] for n in bad)
        name = bad[0]
        cls, eps, var = self._cls[name], self._eps[name], self._var[name]
        std = math.sqrt(var / (var + eps))
        built = f", built at {self._where[name]}" if name in self._where else ""
        sites = sorted({self._where[n] for n in bad if n in self._where})
        return finding(
            self.id, step=first,
            message=(
                f"{len(bad)} normalization layer(s) divide by sqrt(var + eps) with eps at least the "
                f"variance of their input: {names(bad)}. {name} ({cls}{built}) has eps={fmt(eps)} and its "
                f"input's variance is {fmt(var)} (median over what it normalizes; at most eps on "
                f"{self._count[name]} sampled steps from step {self._first[name]}; judged from eps >= "
                f"{fmt(self.config.min_eps)}), so its output's std is {fmt(std)} instead of 1: it damps "
                "its input instead of normalizing it."
            ),
            cause=(f"eps={fmt(eps)} is almost never meant: the second positional argument of {cls} is "
                   "eps, not momentum (Keras's BatchNormalization takes momentum first), or the "
                   "layer's size was passed again (`nn.BatchNorm2d(n5x5, n5x5)`)."),
            fix=(f"Build {name}{' at ' + self._where[name] if built else ''} with the default eps: "
                 f"`nn.{cls}(C)`; a momentum goes by keyword, and Keras's momentum m is PyTorch's 1 - m "
                 "(`nn.BatchNorm2d(C, momentum=0.2)` for Keras's 0.8). `traindoc lint` points at every "
                 "line that builds one."),
            evidence={"modules": bad[:50], "classes": [self._cls[n] for n in bad[:50]],
                      "eps": [self._eps[n] for n in bad[:50]], "variance": [self._var[n] for n in bad[:50]],
                      "sampled_steps": [self._count[n] for n in bad[:50]], "count": len(bad),
                      "built_at": [self._where.get(n, "") for n in bad[:50]], "threshold_eps": self.config.min_eps},
            where=(sites or bad)[:10],
        )
