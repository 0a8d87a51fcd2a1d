"""optimizer-param-mismatch: the model trains on parameters no optimizer holds."""

from __future__ import annotations

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
        Example("zoo/fsdp2_optimizer_before_shard.py", 0),
        Example("zoo/healthy_mlp.py", None),
        Example("zoo/healthy_fsdp2.py", None),
    )

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        self._stray: dict[str, int] = {}
        self._step: int | None = None
        self._held_graded = 0
        # optimizer-held tensors that require grad and never got one (the old head a model
        # swapped out after its optimizer was built), and those that did
        self._orphans: dict[str, None] = {}
        self._graded: set[str] = set()

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, ParamStats)
        if event.optimizer >= 0:
            if event.has_grad:
                self._held_graded += 1
                self._graded.add(event.name)
                self._orphans.pop(event.name, None)
            elif event.requires_grad and event.has_grad is False and event.name not in self._graded:
                self._orphans[event.name] = None
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
        orphans = list(self._orphans)
        if orphans:
            held = f" {len(orphans)} tensor(s) the optimizer holds never got a gradient ({names(orphans)})"
        # The optimizer's own parameters train and none of them is an orphan: these were left out
        # of it, not replaced (the page's cause: a model re-created, or a part of it swapped, after
        # its optimizer was built leaves the optimizer's old tensors without a gradient).
        left_out = self._held_graded > 0 and not orphans
        return finding(
            self.id, step=self._step,
            message=(
                f"{len(stray)} parameter(s) of the model being trained received gradients but are "
                f"held by no optimizer ({names(stray)}; {sum(self._stray.values())} elements)"
                + (";" + held if held else "; the optimizer's own parameters train beside them") + "."
            ),
            cause=(
                f"The optimizer was built from part of what trains: {names(stray)} take part in the "
                "forward and get a gradient every step, but no optimizer was handed them (e.g. "
                "`AdamW(student.parameters())` while a temperature or a head outside `student` is in "
                "the loss), so they never move."
            ) if left_out else None,
            fix=(
                f"Hand {names(stray)} to the optimizer: build it from the module that owns them all "
                "(`model.parameters()`), or add them as a group, "
                "`optimizer.add_param_group({'params': [...]})`."
            ) if left_out else None,
            evidence={"parameters": stray[:50], "count": len(stray), "elements": sum(self._stray.values()),
                      "held_without_gradient": orphans[:50]},
            where=stray[:10],
        )
