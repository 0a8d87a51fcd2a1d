"""optimizer-param-mismatch: the model trains on parameters no optimizer holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, names
from traindoc.events import Event, ParamStats
from traindoc.findings import Finding


class OptimizerParamMismatch(Detector):
    """Parameters of the model that ran forward and backward receive gradients, but no
    optimizer holds them (the source marks them ``optimizer=-1``): step() updates other tensors.
    """

    id = "optimizer-param-mismatch"
    needs = frozenset({"params"})
    examples = (
        Example("zoo/optimizer_mismatch.py", 0),
        Example("zoo/healthy_mlp.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        pass

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._stray: dict[str, int] = {}
        self._step: int | None = None
        self._held_graded = 0

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, ParamStats)
        if event.optimizer >= 0:
            if event.has_grad:
                self._held_graded += 1
            return
        if event.name in self._stray:
            return
        self._stray[event.name] = event.numel
        first = self._step is None
        if first:
            self._step = event.step
        yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._stray:
            yield self._finding()

    def _finding(self) -> Finding:
        stray = list(self._stray)
        held = (" none of the optimizer's own parameters got a gradient"
                if self._held_graded == 0 else "")
        return finding(
            self.id, step=self._step,
            message=(
                f"{len(stray)} parameter(s) of the model being trained received gradients but are "
                f"held by no optimizer ({names(stray)}; {sum(self._stray.values())} elements)"
                + (";" + held if held else "") + "."
            ),
            evidence={"parameters": stray[:50], "count": len(stray), "elements": sum(self._stray.values())},
            where=stray[:10],
        )
