"""eval-before-train-forward: a module evaluated before the training-mode forward its state needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names
from traindoc.events import EvalBeforeTrain, Event
from traindoc.findings import Finding


class EvalBeforeTrainForward(Detector):
    """A module ran in eval mode before any training-mode forward, and the state it then
    relies on is measurably wrong: legacy ``spectral_norm`` divided its weight by a
    power-iteration estimate of the spectral norm ``factor`` times off the measured one. A
    module whose vectors were restored from a checkpoint (estimate right) is quiet, and so is
    BatchNorm at its initial statistics (identity normalization: a sanity validation of a
    fresh model is not wrong)."""

    id = "eval-before-train-forward"
    needs = frozenset({"eval_order"})
    examples = (
        Example("zoo/spectral_norm_sanity_eval.py", 0),
        Example("zoo/healthy_spectral_norm_parametrized.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        factor: float = 2.0  # estimate off by more than this (either way)

        def __post_init__(self) -> None:
            if not self.factor > 1:
                raise ValueError(f"factor must be > 1, got {self.factor}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._off: list[EvalBeforeTrain] = []
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, EvalBeforeTrain)
        if not (event.estimate > 0 and event.actual > 0):
            off = event.actual > 0  # a zero or negative estimate: the output is garbage
        else:
            ratio = event.actual / event.estimate
            off = ratio > self.config.factor or ratio < 1 / self.config.factor
        if not off:
            return
        self._off.append(event)
        if not self._fired:
            self._fired = True
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if len(self._off) > 1:
            yield self._finding()  # final evidence: every module found off

    def _finding(self) -> Finding:
        first = self._off[0]
        parts = [f"{e.module} ({_times(e)})" for e in self._off[:4]]
        scale = 1.0
        for e in self._off:
            if e.estimate > 0:
                scale *= e.actual / e.estimate
        return finding(
            self.id, step=first.step,
            message=(
                f"{len(self._off)} module(s) with legacy spectral_norm ran in eval mode at step "
                f"{first.step} before any training-mode forward ({first.where or 'call site unknown'}): "
                f"their weights were divided by a random power-iteration estimate of the spectral "
                f"norm: {', '.join(parts)}{' ...' if len(self._off) > 4 else ''}. Together they "
                f"scale the outputs about {fmt(scale)}x."
            ),
            cause=("`torch.nn.utils.spectral_norm` (the legacy hook) starts its power-iteration "
                   "vectors at random and updates them only in training-mode forwards; an "
                   "evaluation before the first training step (a sanity validation) uses the "
                   "random estimate, so its outputs and its loss are meaningless."),
            fix=(f"Switch to `torch.nn.utils.parametrizations.spectral_norm` (it runs 15 power "
                 f"iterations when registered), or run one training-mode forward before the first "
                 f"evaluation of {names([e.module for e in self._off], 3)}; discard the numbers "
                 "of this evaluation."),
            evidence={"modules": [e.module for e in self._off[:20]],
                      "estimates": [e.estimate for e in self._off[:20]],
                      "actual": [e.actual for e in self._off[:20]], "output_scale": scale,
                      "where": first.where},
            where=[first.where] if first.where else [],
        )


def _times(e: EvalBeforeTrain) -> str:
    if e.estimate > 0:
        return f"estimate {fmt(e.estimate)} against {fmt(e.actual)}, {fmt(e.actual / e.estimate)}x"
    return f"estimate {fmt(e.estimate)} against {fmt(e.actual)}"
