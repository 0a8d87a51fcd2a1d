"""saturated-outputs: the model's outputs barely depend on the input."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Activation, Event
from traindoc.findings import Finding


class SaturatedOutputs:
    """On most sampled steps the model's output hardly varies across the batch: probabilities
    (values in [0, 1]) with a spread below ``spread`` (e.g. all about 0.5), or any output whose
    spread across the batch is below ``relative`` of its overall spread. Judged over the run."""

    id: ClassVar[str] = "saturated-outputs"
    needs: ClassVar[frozenset[str]] = frozenset({"activations"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("zoo/saturated_dag_scale.py", 0),
        Example("zoo/healthy_mlp.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        spread: float = 0.01
        relative: float = 0.01
        share: float = 0.8  # of sampled steps
        min_steps: int = 10

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._seen = 0
        self._sat: list[Activation] = []
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, Activation)
        if not event.is_output or event.spread is None or event.spread != event.spread:
            return
        self._seen += 1
        if self._saturated(event):
            self._sat.append(event)
        cfg = self.config
        if (not self._fired and self._seen >= 2 * cfg.min_steps
                and len(self._sat) == self._seen):
            self._fired = True
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        cfg = self.config
        if self._seen >= cfg.min_steps and len(self._sat) >= cfg.share * self._seen:
            yield self._finding()

    def _saturated(self, a: Activation) -> bool:
        cfg = self.config
        assert a.spread is not None
        bounded = a.lo is not None and a.hi is not None and a.lo >= 0.0 and a.hi <= 1.0
        if bounded and a.spread < cfg.spread:
            return True
        return a.scale is not None and (a.scale == 0 or a.spread < cfg.relative * a.scale)

    def _finding(self) -> Finding:
        sat = self._sat
        first = sat[0]
        spreads = [a.spread for a in sat if a.spread is not None]
        lo = median([a.lo for a in sat if a.lo is not None])
        hi = median([a.hi for a in sat if a.hi is not None])
        return finding(
            self.id, step=first.step,
            message=(
                f"the output of `{first.module}` varies across the batch by a median "
                f"{fmt(median(spreads))} (std over inputs; threshold {fmt(self.config.spread)}) on "
                f"{len(sat)} of {self._seen} sampled steps; its values sit in [{fmt(lo)}, {fmt(hi)}]."
            ),
            evidence={"module": first.module, "median_spread": median(spreads), "low": lo, "high": hi,
                      "saturated_steps": len(sat), "sampled_steps": self._seen},
            where=[first.module],
        )
