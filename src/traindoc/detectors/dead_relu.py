"""dead-relu: a large share of ReLU units never activate over a window of batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, require
from traindoc.events import Activation, Event
from traindoc.findings import Finding


class DeadRelu(Detector):
    """A ReLU module where at least ``share`` of its units were never positive on any batch of a
    window of ``min_batches`` or more sampled batches (the source reports one dead share per
    window: a unit that dies mid-run must not count as alive because it fired at step 0), in
    two windows in a row, or in its last one. Units silent in one window that fire in the next
    were silent on that window's inputs (the narrow early states of an RL agent), not dead:
    a dead unit gets no gradient and stays dead."""

    id = "dead-relu"
    needs = frozenset({"activations"})
    examples = (
        Example("zoo/dead_relu.py", -1),
        Example("zoo/healthy_mlp.py", None),
        Example("zoo/healthy_cnn_bn.py", None),
        Example("zoo/healthy_rl_reinforce_per_step.py", None),
    )

    # Carried over a resume: each module's latest measurement, the step where it fired, the
    # windows that made it fire (the evidence at the end) and the windows awaiting the next.
    carry = ("_latest", "_first", "_fired", "_pending")

    @dataclass(frozen=True)
    class Config:
        share: float = 0.5
        min_batches: int = 8
        min_units: int = 8

        def __post_init__(self) -> None:
            require(self, share="(0, 1]")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._latest: dict[str, Activation] = {}
        self._first: int | None = None
        self._fired: list[Activation] = []
        self._pending: dict[str, int] = {}  # module -> the step of its window over the threshold

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, Activation)
        if event.dead is None:
            return
        cfg = self.config
        self._latest[event.module] = event
        if not (event.batches >= cfg.min_batches and event.units >= cfg.min_units and event.dead >= cfg.share):
            self._pending.pop(event.module, None)
            return
        if event.module not in self._pending:  # the module's next window confirms it or not
            self._pending[event.module] = event.step
            return
        if self._first is None:
            self._first = self._pending[event.module]
            self._fired = self._bad()
            yield self._finding(self._fired)

    def finish(self) -> Iterator[Finding]:
        bad = self._bad()
        if self._first is None:  # a last window over the threshold: no later one refutes it
            if bad:
                self._first = min(self._pending.get(a.module, a.step) for a in bad)
                yield self._finding(bad)
            return
        if bad:
            yield self._finding(bad)
            return
        # Every module's last window had fewer dead units: the evidence stays the windows that
        # fired, and says that the units fired again (dead units get no gradient: they were
        # silent on that window's inputs, not dead for good).
        latest = max(self._latest.values(), key=lambda a: a.step)
        fired = {a.module for a in self._fired}
        most = max((a.dead or 0.0 for a in self._latest.values() if a.module in fired), default=0.0)
        yield self._finding(self._fired, later=f" By step {latest.step} it was {most:.0%} at most, under the "
                                               "threshold: units that were silent fired again.")

    def _bad(self) -> list[Activation]:
        cfg = self.config
        return sorted((a for a in self._latest.values()
                       if a.dead is not None and a.dead >= cfg.share and a.units >= cfg.min_units),
                      key=lambda a: -(a.dead or 0))

    def _finding(self, bad: list[Activation], later: str = "") -> Finding:
        desc = ", ".join(f"`{a.module}` {a.dead:.0%} of {a.units}" for a in bad[:5])
        batches = max(a.batches for a in bad)
        rows = max(a.rows for a in bad)
        over = f"{batches} sampled batches" + (f" ({rows:,} rows)" if rows else "")
        return finding(
            self.id, step=self._first,
            message=f"ReLU units never active over {over}: {desc} (threshold {self.config.share:.0%}).{later}",
            evidence={"modules": {a.module: a.dead for a in bad[:20] if a.dead is not None},
                      "batches": batches, "rows": rows, "threshold": self.config.share,
                      "recovered": bool(later)},
            where=[a.module for a in bad[:10]],
        )
