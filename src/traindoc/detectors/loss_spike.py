"""loss-spike: a sudden jump of the loss far above its recent level."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, new_phase, phase_note, require
from traindoc.detectors._maths import Ema, Rollouts
from traindoc.events import Event, Forwards, Series, Phase
from traindoc.findings import Finding

SHOWN = 20  # spikes kept for the evidence (the rest are counted)
SPAN = 64  # points scanned at once after a jump; doubled while none is taken

if TYPE_CHECKING:
    import numpy as np


class LossSpike(Detector):
    """The loss jumps to several times its moving average in one step.

    A spike must clear three bars, so that ordinary minibatch noise never fires: the ratio to
    the moving average; a z-score of that ratio's log against the last ``history`` points' own
    excursions above their averages (``_tail_z``), so that a loss whose batches stray far by
    construction (a heavy tail: features x^4 of Gaussian inputs) is judged by its own
    excursions; and an absolute rise that matters against the run's initial loss (so a loss of
    0.01 jumping to 0.04 near convergence is not a spike). The ratio needs a loss that is a
    size: one that was negative within the window (a policy-gradient surrogate, a Gaussian
    log-likelihood) has no scale its average could give, and is not judged there. And it must
    be a spike: within ``recover`` steps the loss comes back under the bar. A loss that stays up
    is a new regime (divergence, a new task head) and is left to the detectors of those. Nor is
    a loss judged once each backward sums a varying number of the model's calls (``Rollouts``:
    an RL episode's steps): its size follows the rollout's length.

    Judged on columns (``observe_series``): a log's column whole, live Scalars in the small
    columns the engine delivers, the rollback guard's one point at a time; one judgement, on
    the exact moving average, so the same findings however a column is cut.
    """

    id = "loss-spike"
    needs = frozenset({"loss"})
    uses = frozenset({"phase", "forwards"})  # the loss starts over at a new phase; rollouts
    examples = (
        Example("golden/loss_spike.jsonl", 30),
        Example("golden/healthy_noisy_loss.jsonl", None),
        Example("zoo/loss_spike.py", -1),
        Example("zoo/healthy_rl_reinforce_per_step.py", None),
        Example("zoo/healthy_heavy_tailed_claims.py", None),
        Example("zoo/healthy_rl_td_actor_critic.py", None),
        Example("zoo/healthy_rl_lightning_dqn.py", None),
        Example("fixtures/logs/csv/loss_spike.csv", 170),
        Example("fixtures/logs/csv/healthy.csv", None),
    )

    # Carried over a resume: the moving average, its window and the spikes so far (the first loss
    # sets the rise that counts).
    carry = ("_ema", "_recent", "_ratios", "_first", "_seen", "_spikes", "_count", "_pending", "_phase",
             "_rollouts")

    @dataclass(frozen=True)
    class Config:
        factor: float = 3.0  # loss / moving average
        z: float = 8.0  # z-score of the jump's log ratio against the history's (_tail_z)
        history: int = 200  # points whose ratios to their average give the noise (_tail_z)
        min_rise: float = 0.1  # rise as a share of the first loss
        window: int = 20
        warmup: int = 10  # steps before spikes are judged
        recover: int = 5  # steps within which the loss must come back under the bar

        def __post_init__(self) -> None:
            require(self, factor="> 1", window=">= 5")
            if self.history < self.window:
                raise ValueError(f"history must be >= window ({self.window}), got {self.history}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._ema = Ema(self.config.window)  # of the points taken in (jumps stay out)
        self._recent: deque[float] = deque(maxlen=self.config.window)  # the last points taken in
        # ... and the logs of the last ``history`` ones' ratios to the average before them
        self._ratios: deque[float] = deque(maxlen=self.config.history)
        self._first: float | None = None
        self._seen = 0  # points taken in
        self._spikes: list[tuple[int, float, float]] = []  # the first SHOWN spikes ...
        self._count = 0  # ... of this many
        self._pending: tuple[int, float, float] | None = None  # a jump awaiting recovery
        self._rollouts = Rollouts()

    def observe(self, event: Event) -> list[Finding]:
        if isinstance(event, Forwards):
            self._rollouts.see(event.step, event.count, event.rows, event.bootstrap)
            return []
        assert isinstance(event, Phase)  # its numbers come as columns
        return new_phase(self, event)

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The next points of the loss, in order. A jump is kept out of the average until it
        resolves, so the judgement is sequential; but between jumps every finite point enters
        the average, so ``_scan`` judges a span of points at once, and ``_aftermath`` follows a
        taken jump point by point. The first scan takes the whole column (a healthy log is one
        scan); after a jump, spans start small and double while no jump is taken, so that the
        averages computed for nothing past the next jump stay within a few times the points
        judged (a log with many spikes stays linear)."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        col = columns.get("loss")
        if col is None:
            return []
        if not self._rollouts.judged:  # a rollout's sum, one sample's loss: no scale to judge
            self._pending = None
            return []
        x, out = vec.floats(col.values), list[Finding]()
        pos, span = 0, len(x)  # a healthy column is one scan
        with np.errstate(all="ignore"):  # values near the float limit overflow to inf, as in Python
            while pos < len(x):
                if self._pending is not None:
                    pos, span = self._aftermath(col, x, pos, out), SPAN
                else:
                    pos, span = self._scan(col, x, pos, min(len(x), pos + span)), 2 * span
        return out

    def _scan(self, col: Series, x: np.ndarray, start: int, stop: int) -> int:
        """Judge points ``start:stop`` (no jump pending) up to the first jump taken, and take in
        the points before it; returns where to go on. The averages before each point are
        computed exactly (``_averages``), so the trigger is checked on all points at once with
        no margin; the z-score, against the window of the points taken in, only where the rest
        holds, in order: a point that fails it is an ordinary point."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        cfg = self.config
        finite = np.isfinite(x[start:stop])  # nonfinite points are nonfinite's and divergence's
        every = bool(finite.all())  # the usual case: no copy
        at = np.arange(start, stop) if every else start + np.flatnonzero(finite)
        if not len(at):
            return stop
        f = x[start:stop] if every else x[at]
        if self._first is None:
            self._first = abs(vec.item(col.values, at[0]))
        avg, weight = self._averages(f)
        value = avg[:-1] / weight[:-1]  # Ema.value before each point (NaN before the first)
        skip = max(0, cfg.warmup - self._seen)  # the points judged: those after the warmup
        ks = skip + np.flatnonzero(f[skip:] / value[skip:] >= cfg.factor)
        ks = ks[(value[ks] > 0) & (f[ks] - value[ks] >= cfg.min_rise * self._first)]
        taken = len(f)  # the index in f of the jump taken, if any
        for k in ks.tolist():
            recent = [*self._recent, *vec.items(col.values, at[max(0, k - cfg.window):k])][-cfg.window:]
            if min(recent, default=0.0) < 0:
                continue  # a loss that changes sign: no ratio to judge
            if _tail_z(math.log(f[k] / value[k]), self._noise(f, value, k)) >= cfg.z:
                taken = k
                break
        self._ema.load_state_dict({"avg": avg[taken].item(), "weight": weight[taken].item()})
        self._seen += taken
        self._recent.extend(vec.items(col.values, at[max(0, taken - cfg.window):taken]))
        self._ratios.extend(_logs(f, value, max(0, taken - cfg.history), taken).tolist())
        if taken == len(f):
            return stop
        # A jump stays out of the average it is judged against, as do the points until it resolves.
        self._pending = (vec.item(col.steps, at[taken]), vec.item(col.values, at[taken]), value[taken].item())
        return int(at[taken]) + 1

    def _noise(self, f: np.ndarray, value: np.ndarray, k: int) -> np.ndarray:
        """The log ratios of the last ``history`` points taken in before point ``k`` of the scan
        (``f``, with the averages before its points in ``value``)."""
        import numpy as np

        here = _logs(f, value, max(0, k - self.config.history), k)
        past = np.fromiter(self._ratios, np.float64, len(self._ratios))
        return np.concatenate((past, here))[-self.config.history:]

    def _averages(self, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``Ema``'s state ``(avg, weight)`` before each point of ``f`` and after the last, by
        ``Ema.update``'s arithmetic: the same bits as point by point, so that a judgement does
        not depend on how the column was cut. The weight soon stops changing."""
        import numpy as np

        a, c = self._ema.alpha, 1 - self._ema.alpha
        state = self._ema.state_dict()
        ax = a * f  # numpy's products round as Python's
        avg = np.empty(len(f) + 1)
        avg[0] = state["avg"]
        done = _lanes(ax, f, a, avg)
        avg[done + 1:] = _updates(avg[done].item(), ax[done:], c)
        weights = [state["weight"]]
        while len(weights) <= len(f) and (w := c * weights[-1] + a) != weights[-1]:
            weights.append(w)
        weight = np.full(len(f) + 1, weights[-1])
        weight[:len(weights)] = weights
        return avg, weight

    def _aftermath(self, col: Series, x: np.ndarray, pos: int, out: list[Finding]) -> int:
        """Follow the pending jump from point ``pos`` until it resolves: back under the bar (a
        spike, reported) or still up after ``recover`` steps (a new regime, not a spike).
        Returns the point the scan goes on from: the one that resolved it, judged afresh."""
        from traindoc.detectors import _vector as vec

        cfg = self.config
        while pos < len(x) and self._pending is not None:
            at, peak, avg = self._pending
            if not math.isfinite(x[pos]):
                self._pending = None  # nonfinite and divergence own that
                return pos + 1
            if x[pos] < cfg.factor * avg:  # back under the bar: it was a spike
                self._pending = None
                self._count += 1
                if len(self._spikes) < SHOWN:
                    self._spikes.append((at, peak, avg))
                out.append(self._finding())
            elif vec.item(col.steps, pos) - at > cfg.recover:  # stayed up: a new regime
                self._pending = None
            else:
                pos += 1  # the jump's aftermath does not enter the average either
        return pos

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


def _tail_z(log_ratio: float, history: np.ndarray) -> float:
    """How many spreads of the loss's own upward excursions ``log_ratio`` (a point's log ratio
    to the moving average before it) lies above its average. The spread is read from the
    history's excursions above their averages at their 90th percentile: a Gaussian's sigma
    (1.645 sigma there) when the batches' noise is Gaussian, wider when it is heavy-tailed, so
    that such a loss's frequent far excursions count as its noise. (A median absolute deviation
    reads the 50th percentile and calls a heavy tail's ordinary excursions outliers; points
    below their average, a loss falling fast, say nothing of how far it strays up.)"""
    import numpy as np

    ups = history[history > 0]
    if not len(ups):
        return math.inf
    at = 0.9 * (len(ups) - 1)  # np.quantile's (linear) 90th percentile, by a partial sort
    lo = int(at)
    hi = min(lo + 1, len(ups) - 1)
    part = np.partition(ups, (lo, hi))
    spread = float(part[lo] + (at - lo) * (part[hi] - part[lo])) / 1.645
    return log_ratio / spread if spread > 0 else math.inf


def _logs(f: np.ndarray, value: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The logs of the ratios of points ``start:stop`` to their averages, where both are
    positive (a first point has no average; a loss at zero no log)."""
    import numpy as np

    logs = np.log(f[start:stop] / value[start:stop])
    return logs[np.isfinite(logs)]


def _updates(avg: float, ax: np.ndarray, c: float) -> np.ndarray:
    """The states after ``avg = c * avg + ax`` for each of ``ax`` (``Ema.update``'s rounding:
    the product, then the sum), in order: the sequential loop."""
    import numpy as np

    def states(avg: float) -> Iterator[float]:
        for t in ax.tolist():
            avg = c * avg + t
            yield avg

    return np.fromiter(states(avg), np.float64, len(ax))


def _lanes(ax: np.ndarray, f: np.ndarray, alpha: float, avg: np.ndarray) -> int:
    """``avg[1:n+1]`` as ``_updates`` computes it, for the first n points of a long column;
    returns n (0 for a short one). The loop costs ~75 ns a point in Python; here the column is
    cut into lanes updated side by side by numpy, with the loop's two roundings per point.
    Each lane starts ``warm`` points early from a guess (the loss there): its error shrinks by
    ``1 - alpha`` a point, under the rounding after ~37 / alpha points, and two runs that differ
    by rounding soon fall onto the same bits. A lane is taken only where its state before its
    first point equals, bit for bit, the exact state the lane before it ended with: from equal
    states the same updates give the same bits. The loop computes any other. So every state is
    the loop's whatever the data; the lanes make it ~4x faster."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    warm = math.ceil(48 / alpha)
    size = 2 * warm
    n_lanes = len(ax) // size
    if n_lanes < 64:  # numpy's per-call cost outweighs the loop's
        return 0
    # [k, lane]: the term of point lane * size - warm + k (lane 0's first warm: its state
    # before point 0 is avg[0]), and the state before it; rows contiguous, one ufunc each.
    padded = np.concatenate((np.zeros(warm), ax))
    terms = list(np.ascontiguousarray(sliding_window_view(padded, warm + size)[::size][:n_lanes].T))
    block = np.empty((warm + size + 1, n_lanes))
    block[0] = f[np.maximum(size * np.arange(n_lanes) - warm, 0)]
    states, c, tmp = list(block), 1 - alpha, np.empty(n_lanes)
    for k in range(warm + size):
        if k == warm:
            states[k][0] = avg[0]
        np.multiply(states[k], c, out=tmp)
        np.add(tmp, terms[k], out=states[k + 1])
    n = n_lanes * size
    avg[1:n + 1].reshape(n_lanes, size)[...] = block[warm + 1:].T
    for lane, start in enumerate(states[warm].tolist()):
        at = lane * size
        if lane and start != avg[at]:  # avg[at]: the exact state the lane before ended with
            avg[at + 1:at + size + 1] = _updates(avg[at].item(), ax[at:at + size], c)
    return n
