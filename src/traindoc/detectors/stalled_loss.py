"""stalled-loss: the loss has not improved over a long window from the start."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, new_phase, phase_note
from traindoc.detectors._maths import median
from traindoc.events import Event, Series, Phase
from traindoc.findings import Finding


class StalledLoss(Detector):
    """The best smoothed loss (rolling median of ``smooth``) is less than ``improvement`` below
    the initial smoothed loss. Judged at the end of runs of at least ``min_steps`` steps, never
    during the run: a long warmup (thousands of steps at a tiny LR in LLM training) looks
    stalled until it ends, and a finding cannot be taken back.

    Judged on columns (``observe_series``): a log's column whole, live Scalars in the small
    columns the engine delivers; the same findings however a column is cut.
    """

    id = "stalled-loss"
    needs = frozenset({"loss"})
    uses = frozenset({"phase"})  # the loss starts over at a new phase
    examples = (
        Example("zoo/lr_zero_warmup.py", 0),
        Example("zoo/clamped_loss.py", 0),
        Example("zoo/healthy_gpt.py", None),
        Example("golden/healthy_noisy_loss.jsonl", None),
        Example("fixtures/logs/csv/stalled_loss.csv", 0),
        Example("fixtures/logs/tensorboard/healthy", None),
    )

    # Carried over a resume: the smoothing window and the initial and best levels since the first
    # step (judged at the end, over the whole run).
    carry = ("_tail", "_first_step", "_last_step", "_initial", "_best", "_phase")

    @dataclass(frozen=True)
    class Config:
        improvement: float = 0.02
        smooth: int = 10
        min_steps: int = 100

        def __post_init__(self) -> None:
            if self.smooth < 1 or self.min_steps < self.smooth:
                raise ValueError("need smooth >= 1 and min_steps >= smooth")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._tail: deque[float] = deque(maxlen=self.config.smooth)  # the last finite values
        self._first_step: int | None = None
        self._last_step = 0
        self._initial: float | None = None  # the first smoothed loss
        self._best: float | None = None  # the lowest smoothed loss

    def observe(self, event: Event) -> list[Finding]:
        assert isinstance(event, Phase)  # its numbers come as columns
        return new_phase(self, event)

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The next points of the loss: the medians of the windows ending at its finite points
        (``_tail`` carries the window over to the next call) move the initial and the best
        level; nothing is judged before ``finish``."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        col = columns.get("loss")
        if col is None:
            return []
        pos = np.flatnonzero(np.isfinite(vec.floats(col.values)))
        if not len(pos):
            return []
        if self._first_step is None:
            self._first_step = vec.item(col.steps, pos[0])
        self._last_step = vec.item(col.steps, pos[-1])
        n = self.config.smooth
        head = list(self._tail)[max(0, len(self._tail) - n + 1):]  # the last n - 1 values
        med = vec.RollingMedian(np.concatenate((np.array(head, dtype=float), vec.floats(col.values)[pos])), n)
        self._tail.extend(vec.items(col.values, pos[-n:]))
        if len(med):
            with np.errstate(all="ignore"):  # an even window's median overflows near 1.8e308, as in Python
                if self._initial is None:
                    self._initial = float(med.at([0])[0])
                # A long column: only the medians that can be the lowest (a million cost ~100 ms).
                best = med.extreme(lowest=True)[0] if len(med) > 256 else float(med.at(slice(None)).min())
            self._best = best if self._best is None else min(self._best, best)
        return []

    def finish(self) -> Iterator[Finding]:
        steps = self._last_step - (self._first_step or 0) + 1
        if steps >= self.config.min_steps and self._stalled():
            yield self._finding()

    def _stalled(self) -> bool:
        """Flat, not rising: a loss that climbs far above where it started is divergence."""
        if self._initial is None or self._best is None:
            return False
        last = median(list(self._tail))
        flat = last <= self._initial + 0.5 * abs(self._initial)
        return flat and self._initial - self._best < self.config.improvement * abs(self._initial)

    def _finding(self) -> Finding:
        assert self._initial is not None and self._best is not None
        gain = (self._initial - self._best) / abs(self._initial) if self._initial else 0.0
        steps = self._last_step - (self._first_step or 0) + 1
        return finding(
            self.id, step=self._first_step,
            message=(
                f"over {steps} steps the loss improved by {gain:.2%} (from {fmt(self._initial)} to a "
                f"best of {fmt(self._best)}, {self.config.smooth}-step medians; threshold "
                f"{self.config.improvement:.0%})."
                + phase_note(self)
            ),
            evidence={"initial": self._initial, "best": self._best, "improvement": gain,
                      "steps": steps, "threshold": self.config.improvement},
        )
