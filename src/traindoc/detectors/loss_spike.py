"""loss-spike: a sudden jump of the loss far above its recent level."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, new_phase, phase_note
from traindoc.detectors._maths import Ema, robust_z
from traindoc.events import Event, Series, Phase
from traindoc.findings import Finding

SHOWN = 20  # spikes kept for the evidence (the rest are counted)

if TYPE_CHECKING:
    import numpy as np


class LossSpike(Detector):
    """The loss jumps to several times its moving average in one step.

    A spike must clear three bars, so that ordinary minibatch noise never fires: the ratio to
    the moving average, a robust z-score against the recent window (noise-aware), and an
    absolute rise that matters against the run's initial loss (so a loss of 0.01 jumping to
    0.04 near convergence is not a spike). And it must be a spike: within ``recover`` steps the
    loss comes back under the bar. A loss that stays up is a new regime (divergence, a new
    task head) and is left to the detectors of those.

    Judged on columns (``observe_series``): a log's column whole, live Scalars in the small
    columns the engine delivers; the same findings however a column is cut. ``observe`` judges
    one point, for the rollback guard, which must see every spike as it resolves.
    """

    id = "loss-spike"
    needs = frozenset({"loss"})
    uses = frozenset({"phase"})  # the loss starts over at a new phase
    examples = (
        Example("golden/loss_spike.jsonl", 30),
        Example("golden/healthy_noisy_loss.jsonl", None),
        Example("zoo/loss_spike.py", -1),
        Example("fixtures/logs/csv/loss_spike.csv", 170),
        Example("fixtures/logs/csv/healthy.csv", None),
    )

    # Carried over a resume: the moving average, its window and the spikes so far (the first loss
    # sets the rise that counts).
    carry = ("_ema", "_recent", "_first", "_seen", "_spikes", "_count", "_pending", "_phase")

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
        self._spikes: list[tuple[int, float, float]] = []  # the first SHOWN spikes ...
        self._count = 0  # ... of this many
        self._pending: tuple[int, float, float] | None = None  # a jump awaiting recovery
        self._unfolded: np.ndarray | None = None  # points that entered the average, not yet _ema

    def state_dict(self) -> dict[str, object]:
        """``carry``, with the average of the points taken in so far."""
        self._fold()  # the average of the points taken in so far
        return super().state_dict()

    def observe(self, event: Event) -> list[Finding]:
        assert isinstance(event, Phase)  # its numbers come as columns
        return new_phase(self, event)

    def _point(self, step: int, x: float) -> list[Finding]:
        """The judgement of one point, in order."""
        self._fold()
        if not math.isfinite(x):
            self._pending = None
            return []  # nonfinite and divergence own that
        if self._first is None:
            self._first = abs(x)
        cfg, out = self.config, []
        if self._pending is not None:
            at, peak, avg = self._pending
            if x < cfg.factor * avg:  # back under the bar: it was a spike
                self._pending = None
                self._count += 1
                if len(self._spikes) < SHOWN:
                    self._spikes.append((at, peak, avg))
                out.append(self._finding())
            elif step - at > cfg.recover:  # stayed up: a new regime, not a spike
                self._pending = None
            else:
                return []  # the jump's aftermath does not enter the average either
        avg = self._ema.value
        if self._seen >= cfg.warmup and avg > 0 and self._pending is None:
            if (
                x / avg >= cfg.factor
                and robust_z(x, list(self._recent)) >= cfg.z
                and x - avg >= cfg.min_rise * self._first
            ):
                self._pending = (step, x, avg)
                return out  # a jump does not enter the average it is judged against
        self._seen += 1
        self._ema.update(x)
        self._recent.append(x)
        return out

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The next points of the loss, judged by ``_point`` where a jump is possible at all.
        The judgement is sequential (a jump is kept out of the average until it resolves), so a
        vectorized screen finds the first point where a jump could be taken (loss / moving
        average >= ``factor`` and the rise >= ``min_rise``, with a margin for the vectorized
        EMA's rounding); up to it nothing can fire and the state advances exactly; from it,
        ``_point`` judges until the jump resolved; then the screen goes on. A healthy run is one
        screen."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        col = columns.get("loss")
        if col is None:
            return []
        if len(col) == 1:  # one point (the rollback guard's, step by step): no screen to set up
            return self._point(int(col.steps[0]), float(col.values[0]))
        with np.errstate(all="ignore"):  # values near the float limit overflow to inf, as in Python
            return self._judge(col, vec.floats(col.values))

    def _judge(self, col: Series, x: np.ndarray) -> list[Finding]:
        from traindoc.detectors import _vector as vec

        out: list[Finding] = []
        pos, span = 0, len(x)  # first screen: the whole column
        while pos < len(x):
            if self._pending is None:
                stop = min(len(x), pos + span)
                hit = self._screen(x, pos, stop)
                self._advance(col, x, pos, stop if hit is None else hit)
                pos, span = (stop, 2 * span) if hit is None else (hit, 4096)
                if hit is None:
                    continue
            out += self._point(vec.item(col.steps, pos), vec.item(col.values, pos))
            pos += 1
        return out

    def _screen(self, x: np.ndarray, start: int, stop: int) -> int | None:
        """The first index in ``start:stop`` where ``_point`` could take a jump, from the state
        at ``start`` (no jump pending): None when it can take none."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        self._fold()
        cfg, state = self.config, self._ema.state_dict()
        avg0, weight0, alpha = state["avg"], state["weight"], self._ema.alpha
        pos = start + np.flatnonzero(np.isfinite(x[start:stop]))
        if not len(pos):
            return None
        f = x[pos]
        avg, weight = vec.ema(f, alpha, avg0, weight0)
        # The EMA of |x|: what the rounding of vec.ema is relative to.
        signed = avg0 < 0 or f.min() < 0
        abs_avg = vec.ema(np.abs(f), alpha, abs(avg0), weight0)[0] if signed else avg
        skip = max(0, cfg.warmup - self._seen)  # the points judged: those after the warmup
        if not (np.isfinite(avg).all() and np.isfinite(abs_avg).all()):  # values near 1e308
            return int(pos[skip]) if skip < len(f) else None  # _point judges
        # Each point is judged against the average before its own update (weight 0: none).
        w_before = np.concatenate(([weight0], weight[:-1]))[skip:]
        value = np.concatenate(([avg0], avg[:-1]))[skip:] / w_before
        scale = np.concatenate(([abs(avg0)], abs_avg[:-1]))[skip:] / w_before if signed else value
        # 1e-6 of it is far beyond what vec.ema and the sequential loop can differ by (~1e-10).
        lo = value - 1e-6 * scale
        f = f[skip:]
        at = np.flatnonzero(f >= cfg.factor * lo * (1 - 1e-12))  # x / avg >= factor
        f, lo, scale = f[at], lo[at], scale[at]
        rise = cfg.min_rise * (self._first if self._first is not None else abs(float(x[pos[0]])))
        possible = ((f > 0) & (lo + 2e-6 * scale > 0)  # avg > 0, and x - avg >= rise:
                    & (f - lo >= rise - 1e-6 * scale - 1e-9 * (np.abs(f) + abs(rise))))
        i = vec.first_true(possible)
        return None if i is None else int(pos[skip + at[i]])

    def _advance(self, col: Series, x: np.ndarray, start: int, stop: int) -> None:
        """The state after points ``start:stop``, where no jump can be taken: every finite
        point enters the average. The average itself is computed when next read (``_fold``):
        a log's column is read once, and its million points would cost ~60 ms."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        pos = start + np.flatnonzero(np.isfinite(x[start:stop]))
        if not len(pos):
            return
        self._fold()
        if self._first is None:
            self._first = abs(vec.item(col.values, pos[0]))
        self._seen += len(pos)
        self._recent.extend(vec.items(col.values, pos[-self.config.window:]))
        self._unfolded = x[start:stop]  # a view: no copy of a million-row column

    def _fold(self) -> None:
        """The average after the points of the last ``_advance``: ``Ema.update``'s arithmetic,
        operation for operation (the same bits as point by point)."""
        if self._unfolded is None:
            return
        import numpy as np

        xs, self._unfolded = self._unfolded, None
        xs = xs[np.isfinite(xs)]
        a, c = self._ema.alpha, 1 - self._ema.alpha
        now = self._ema.state_dict()
        avg, weight = now["avg"], now["weight"]
        for ax in (a * xs).tolist():  # numpy's products round as Python's
            avg = c * avg + ax
        for _ in range(len(xs)):  # the weight soon stops changing
            weight, before = c * weight + a, weight
            if weight == before:
                break
        self._ema.load_state_dict({"avg": avg, "weight": weight})

    def _finding(self) -> Finding:
        step, x, avg = self._spikes[0]
        cfg = self.config
        more = f" ({self._count} spikes in all)" if self._count > 1 else ""
        return finding(
            self.id,
            step=step,
            message=(
                f"loss {fmt(x)} at step {step} is {fmt(x / avg)}x its {cfg.window}-step moving "
                f"average ({fmt(avg)}; threshold {fmt(cfg.factor)}x){more}."
                + phase_note(self)
            ),
            evidence={
                "loss": x, "moving_average": avg, "ratio": x / avg, "threshold": cfg.factor,
                "spikes": self._count, "spike_steps": [s for s, _, _ in self._spikes],
            },
        )
