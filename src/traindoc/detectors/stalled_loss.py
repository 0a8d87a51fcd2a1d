"""stalled-loss: the loss has not improved over a long window from the start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar, Series
from traindoc.findings import Finding


class StalledLoss:
    """The best smoothed loss (rolling median of ``smooth``) is less than ``improvement`` below
    the initial smoothed loss. Judged at the end of runs of at least ``min_steps`` steps, never
    during the run: a long warmup (thousands of steps at a tiny LR in LLM training) looks
    stalled until it ends, and a finding cannot be taken back."""

    id: ClassVar[str] = "stalled-loss"
    needs: ClassVar[frozenset[str]] = frozenset({"loss"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("zoo/lr_zero_warmup.py", 0),
        Example("zoo/clamped_loss.py", 0),
        Example("zoo/healthy_gpt.py", None),
        Example("golden/healthy_noisy_loss.jsonl", None),
        Example("fixtures/logs/csv/stalled_loss.csv", 0),
        Example("fixtures/logs/tensorboard/healthy", None),
    )

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
        self._values: list[float] = []
        self._first_step: int | None = None
        self._last_step = 0
        self._initial: float | None = None
        self._best: float | None = None

    def observe(self, event: Event) -> None:
        assert isinstance(event, Scalar)
        if event.value != event.value or abs(event.value) == float("inf"):
            return
        if self._first_step is None:
            self._first_step = event.step
        self._last_step = event.step
        self._values.append(event.value)
        n = self.config.smooth
        if len(self._values) >= n:
            smooth = median(self._values[-n:])
            if self._initial is None:
                self._initial = smooth
            self._best = smooth if self._best is None else min(self._best, smooth)
        if len(self._values) > 4 * n:  # keep memory bounded: only the tail is needed
            del self._values[: -2 * n]

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The loss column at once: the rolling medians of its finite values give the initial
        and the best level; the state is the one ``observe`` leaves, for ``finish``."""
        from traindoc.detectors import _vector as vec

        return vec.judge(self, columns, {"loss"}, self._observe_columns)

    def _observe_columns(self, columns: dict[str, Series]) -> list[Finding]:
        import numpy as np

        from traindoc.detectors import _vector as vec

        col = columns.get("loss")
        if col is None:
            return []
        pos = np.flatnonzero(np.isfinite(vec.floats(col.values)))
        if not len(pos):
            return []
        f = vec.floats(col.values)[pos]
        n = self.config.smooth
        self._first_step = vec.item(col.steps, pos[0])
        if len(f) >= n:
            med = vec.RollingMedian(f, n)  # window k ends at the finite point k + n - 1
            self._initial = float(med.at([0])[0])
            self._best = med.extreme(lowest=True)[0]
        self._last_step = vec.item(col.steps, pos[-1])
        # observe keeps 2n to 4n of the last values: the same ones
        m = len(f)
        keep = m if m <= 4 * n else 2 * n + (m - 4 * n - 1) % (2 * n + 1)
        self._values = vec.items(col.values, pos[m - keep:])
        return []

    def finish(self) -> Iterator[Finding]:
        steps = self._last_step - (self._first_step or 0) + 1
        if steps >= self.config.min_steps and self._stalled():
            yield self._finding()

    def _stalled(self) -> bool:
        """Flat, not rising: a loss that climbs far above where it started is divergence."""
        if self._initial is None or self._best is None:
            return False
        last = median(self._values[-self.config.smooth:])
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
            ),
            cause=(
                "The parameters are not moving usefully: an LR far too low (or 0), updates that "
                "round away in bf16/fp16 parameters, gradients that do not reach the parameters, or "
                "a loss that does not depend on them. The other findings of this run name which."
            ),
            fix=(
                "Check that the parameters change (traindoc's update findings), that the LR "
                "schedule's values are what you expect, and that the model can overfit one small "
                "batch in ~100 steps."
            ),
            evidence={"initial": self._initial, "best": self._best, "improvement": gain,
                      "steps": steps, "threshold": self.config.improvement},
        )
