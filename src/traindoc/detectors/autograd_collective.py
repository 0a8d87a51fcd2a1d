"""autograd-collective: a torch.distributed collective on a tensor inside the autograd graph."""

from __future__ import annotations

from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, names
from traindoc.events import CollectiveInGraph, Event
from traindoc.findings import Finding


class AutogradCollective(Detector):
    """Fires at the first ``CollectiveInGraph`` (a collective called with grad mode on, on a
    tensor that requires grad); the evidence lists every such call site seen by then."""

    id = "autograd-collective"
    needs = frozenset({"collective"})
    examples = (
        Example("zoo/ddp_allreduce_loss.py", 0),
        Example("zoo/healthy_ddp_ema.py", None),
    )

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        self._sites: list[CollectiveInGraph] = []

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, CollectiveInGraph)
        if any(s.where == event.where and s.op == event.op for s in self._sites):
            return
        self._sites.append(event)
        yield self._finding()

    def _finding(self) -> Finding:
        first = self._sites[0]
        sites = [f"{s.op} at {s.where}" for s in self._sites]
        return finding(
            self.id, step=first.step,
            message=(f"dist.{first.op} at {first.where} ran on {first.tensor}, which requires grad, "
                     f"with grad mode on (step {first.step}): the collective changes its value but "
                     f"autograd backpropagates the local computation. Call sites: {names(sites)}."),
            fix=(f"Reduce a detached copy for logging (`t = x.detach().clone(); dist.{first.op}(t)`) or "
                 f"wrap the call at {first.where} in `with torch.no_grad():`; when the gradient must "
                 f"flow through it, use `torch.distributed.nn.functional.{first.op}`."),
            evidence={"op": first.op, "tensor": first.tensor, "sites": sites[:20]},
            where=[s.where for s in self._sites][:10],
        )
