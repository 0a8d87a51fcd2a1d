"""loss-spike: a sudden jump of the loss far above its recent level."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import ClassVar, Iterator

from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import Ema, robust_z
from traindoc.events import Event, Scalar
from traindoc.findings import Finding


class LossSpike:
    """The loss jumps to several times its moving average in one step.

    A spike must clear three bars, so that ordinary minibatch noise never fires: the ratio to
    the moving average, a robust z-score against the recent window (noise-aware), and an
    absolute rise that matters against the run's initial loss (so a loss of 0.01 jumping to
    0.04 near convergence is not a spike). And it must be a spike: within ``recover`` steps the
    loss comes back under the bar. A loss that stays up is a new regime (divergence, a new
    task head) and is left to the detectors of those.
    """

    id: ClassVar[str] = "loss-spike"
    needs: ClassVar[frozenset[str]] = frozenset({"loss"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("golden/loss_spike.jsonl", 30),
        Example("golden/healthy_noisy_loss.jsonl", None),
        Example("zoo/loss_spike.py", -1),
    )

    @dataclass(frozen=True)
    class Config:
        factor: float = 3.0  # loss / moving average
        z: float = 8.0  # robust z-score against the window
        min_rise: float = 0.1  # rise as a share of the first loss
        window: int = 20
        warmup: int = 10  # steps before spikes are judged
        recover: int = 5  # steps within which the loss must come back under the bar

        def __post_init__(self) -> None:
            if self.factor <= 1:
                raise ValueError(f"factor must be > 1, got {self.factor}")
            if self.window < 5:
                raise ValueError(f"window must be >= 5, got {self.window}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._ema = Ema(self.config.window)
        self._recent: deque[float] = deque(maxlen=self.config.window)
        self._first: float | None = None
        self._seen = 0
        self._spikes: list[tuple[int, float, float]] = []
        self._pending: tuple[int, float, float] | None = None  # a jump awaiting recovery

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, Scalar)
        x = event.value
        if not math.isfinite(x):
            self._pending = None
            return  # nonfinite and divergence own that
        if self._first is None:
            self._first = abs(x)
        cfg = self.config
        if self._pending is not None:
            step, peak, avg = self._pending
            if x < cfg.factor * avg:  # back under the bar: it was a spike
                self._pending = None
                self._spikes.append((step, peak, avg))
                yield self._finding()
            elif event.step - step > cfg.recover:  # stayed up: a new regime, not a spike
                self._pending = None
            else:
                return  # the jump's aftermath does not enter the average either
        avg = self._ema.value
        if self._seen >= cfg.warmup and avg > 0 and self._pending is None:
            if (
                x / avg >= cfg.factor
                and robust_z(x, list(self._recent)) >= cfg.z
                and x - avg >= cfg.min_rise * self._first
            ):
                self._pending = (event.step, x, avg)
                return  # a jump does not enter the average it is judged against
        self._seen += 1
        self._ema.update(x)
        self._recent.append(x)

    def finish(self) -> Iterator[Finding]:
        return iter(())

    def _finding(self) -> Finding:
        step, x, avg = self._spikes[0]
        cfg = self.config
        more = f" ({len(self._spikes)} spikes in all)" if len(self._spikes) > 1 else ""
        return finding(
            self.id,
            step=step,
            message=(
                f"loss {fmt(x)} at step {step} is {fmt(x / avg)}x its {cfg.window}-step moving "
                f"average ({fmt(avg)}; threshold {fmt(cfg.factor)}x){more}."
            ),
            cause=(
                "A batch with outliers or corrupt labels, an LR too high for this point of the "
                "schedule (often right after warmup), or a numerically unstable op."
            ),
            fix=(
                "Look at the batch of that step; lower the peak LR or lengthen warmup; clip "
                "gradients. `traindoc run --guard` can roll back to the last good state and "
                "halve the LR automatically."
            ),
            evidence={
                "loss": x, "moving_average": avg, "ratio": x / avg, "threshold": cfg.factor,
                "spikes": len(self._spikes), "spike_steps": [s for s, _, _ in self._spikes[:20]],
            },
        )
