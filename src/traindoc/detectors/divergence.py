"""divergence: the loss grows by orders of magnitude or heads to NaN."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, new_phase, phase_note, require
from traindoc.detectors._maths import Rollouts
from traindoc.events import Event, Forwards, Series, Phase
from traindoc.findings import Finding

if TYPE_CHECKING:  # numpy is imported where a column is judged: the live face starts without it
    import numpy as np

    from traindoc.detectors import _vector as vec


class Divergence(Detector):
    """The smoothed loss (median of the last ``smooth`` finite values) rises to ``factor`` times
    its best so far and above its initial level, and stays there at the next smoothed point (or
    the loss turns NaN/Inf before it), or the loss turns NaN/Inf after the smoothed loss rose
    ``nan_rise`` times above its best. Comparing with the initial level too keeps a loss that
    wobbles near zero at the end of training from firing.

    The rise must hold because a diverging loss stays up, while a loss column that takes turns
    between two objectives does not: live, each optimizer's step of a GAN is a step of its own,
    so D's loss (~0.7) and G's (~100 with pix2pix's L1 weight of 100) alternate, and the median
    of five flips between the two levels at every step. A rise that holds for one smoothed point
    only is no divergence; one at the last point of the run is not judged. Nor is a loss once
    each backward sums a varying number of the model's calls (``Rollouts``: an RL episode's
    steps): its size grows with the episodes as the policy gets better.

    Judged on columns (``observe_series``): a log's column whole, live Scalars in the small
    columns the engine delivers; the same findings however a column is cut.
    """

    id = "divergence"
    needs = frozenset({"loss"})
    uses = frozenset({"phase", "forwards"})  # the loss starts over at a new phase; rollouts
    examples = (
        Example("zoo/divergence.py", -1),
        Example("zoo/healthy_rl_actor_critic.py", None),
        Example("zoo/healthy_rl_td_actor_critic.py", None),
        Example("zoo/healthy_rl_lightning_dqn.py", None),
        Example("golden/diverging_loss.jsonl", 18),
        Example("golden/healthy_noisy_loss.jsonl", None),
        Example("fixtures/logs/tensorboard/diverging", 144),
        Example("fixtures/logs/tensorboard/healthy", None),
    )

    # Carried over a resume: the smoothing window, the initial, best, latest and peak levels, and
    # where it fired.
    carry = ("_tail", "_initial", "_best", "_best_step", "_last", "_peak", "_fired", "_rising", "_phase",
             "_rollouts")

    @dataclass(frozen=True)
    class Config:
        factor: float = 10.0
        above_initial: float = 2.0
        nan_rise: float = 10.0
        smooth: int = 5

        def __post_init__(self) -> None:
            require(self, factor="> 1", smooth=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._tail: deque[float] = deque(maxlen=self.config.smooth - 1)  # the last finite values
        self._initial: float | None = None  # the first smoothed loss
        self._best = math.inf
        self._best_step = 0
        self._last = math.nan  # the latest smoothed loss
        self._peak = -math.inf
        self._fired: tuple[int, float, str] | None = None
        # (step, smoothed loss): the rise at the last smoothed point so far, which the next one
        # (or a non-finite value before it) confirms; the state is the one at that point.
        self._rising: tuple[int, float] | None = None
        self._rollouts = Rollouts()

    def observe(self, event: Event) -> list[Finding]:
        if isinstance(event, Forwards):
            self._rollouts.see(event.step, event.count, event.rows, event.bootstrap)
            return []
        assert isinstance(event, Phase)  # its numbers come as columns
        return new_phase(self, event)

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The next points of the loss. The smoothed loss at each finite point is the median of
        the window ending there (``_tail`` carries the window over to the next call); the first
        point where the judgement holds fires, and the peak goes on to the end."""
        import numpy as np

        col = columns.get("loss")
        if col is None or not len(col):
            return []
        if not self._rollouts.judged and not self._fired:  # a rollout's sum, one sample: no scale
            self._rising = None
            return []
        with np.errstate(all="ignore"):  # values near the float limit overflow to inf, as in Python
            return self._judge(col)

    def _judge(self, col: Series) -> list[Finding]:
        import numpy as np

        from traindoc.detectors import _vector as vec

        x = vec.floats(col.values)
        pos = np.flatnonzero(np.isfinite(x))
        n, t = self.config.smooth, len(self._tail)
        med = vec.RollingMedian(np.concatenate((np.array(self._tail, dtype=float), x[pos])), n)
        lag = n - 1 - t  # window k ends at the finite point pos[k + lag]
        if n > 1:
            self._tail.extend(vec.items(col.values, pos[-(n - 1):]))
        # A non-finite point is judged against the last median before it: window k_bad (bad[i]
        # has bad[i] - i finite points before it); k_bad < 0: a median from an earlier call.
        bad = np.flatnonzero(~np.isfinite(x))
        k_bad = bad - np.arange(len(bad)) - 1 - lag
        if len(med) > 256 and not self._rising and (self._fired or not self._may_fire(med, k_bad)):
            self._bounded(col, pos, med, lag)  # a long column where nothing fires
            return []
        return self._judge_medians(col, pos, bad, k_bad, med.at(slice(None)), lag)

    def _bounded(self, col: Series, pos: np.ndarray, med: vec.RollingMedian, lag: int) -> None:
        """The state after a column where nothing fires, from the few medians that can be the
        lowest or the highest (a million medians cost ~100 ms, these a few ms)."""
        from traindoc.detectors import _vector as vec

        self._peak = max(self._peak, med.extreme(lowest=False)[0])
        if self._fired:
            return
        if self._initial is None:
            self._initial = float(med.at([0])[0])
        best, k = med.extreme(lowest=True)
        if best < self._best:
            self._best, self._best_step = best, vec.item(col.steps, pos[k + lag])
        self._last = float(med.at([len(med) - 1])[0])

    def _may_fire(self, med: vec.RollingMedian, k_bad: np.ndarray) -> bool:
        """Whether anything can fire, from bounds: a window's max bounds its median from above,
        the running min of the windows' min (and the best so far) the best from below."""
        import numpy as np

        cfg = self.config
        if len(k_bad) and k_bad[0] < 0 and self._last >= cfg.nan_rise * self._best > 0:
            return True  # a non-finite point before this column's first median, after a rise
        initial = self._initial if self._initial is not None else float(med.at([0])[0])
        low, hi = np.minimum(np.minimum.accumulate(med.lo), self._best), med.hi
        if np.any((hi > 0) & (hi >= cfg.factor * low) & (hi >= cfg.above_initial * initial)):
            return True
        k = k_bad[k_bad >= 0]
        return bool(len(k)) and (cfg.nan_rise <= 0 or bool(np.any(hi[k] >= cfg.nan_rise * low[k])))

    def _judge_medians(self, col: Series, pos: np.ndarray, bad: np.ndarray, k_bad: np.ndarray,
                    smooth: np.ndarray, lag: int) -> list[Finding]:
        """The judgement with all the medians ``smooth`` of this call (``smooth[k]`` at the
        finite point ``pos[k + lag]``) and its non-finite points ``bad`` (the last median
        before each: ``smooth[k_bad]``); the state is the one at the point that fires, or at
        the last point."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        peak = float(smooth.max()) if len(smooth) else -math.inf
        if self._fired:  # after firing, only the peak goes on
            self._peak = max(self._peak, peak)
            return []
        cfg = self.config
        initial = self._initial if self._initial is not None else (
            float(smooth[0]) if len(smooth) else math.nan)
        best = np.minimum(np.minimum.accumulate(smooth), self._best)
        lower = smooth < np.concatenate(([self._best], best[:-1]))  # a new best: strictly lower
        best_at = np.maximum.accumulate(np.where(lower, np.arange(len(smooth)), -1))
        rose = (best > 0) & (smooth >= cfg.factor * best) & (smooth >= cfg.above_initial * initial)
        # A non-finite point after median k and before the next one: k_bad == k.
        nan_next = np.zeros(len(smooth), dtype=bool)
        nan_next[k_bad[k_bad >= 0]] = True
        if self._rising is not None:  # the rise at the last point of the previous call
            if (len(bad) and k_bad[0] < 0) or (len(smooth) and rose[0]):
                step, value = self._rising
                self._rising = None
                self._fired = (step, value, "rose")
                out = [self._finding(*self._fired)]
                self._peak = max(self._peak, peak)
                return out
            if not len(smooth):
                return []  # nothing after it yet
            self._rising = None  # it did not hold: the state at it goes on
        held = rose & (np.append(rose[1:], False) | nan_next)
        k_rose = vec.first_true(held)
        ks = np.maximum(k_bad, 0)
        last = np.where(k_bad >= 0, smooth[ks] if len(smooth) else 0.0, self._last)
        ref = np.where(k_bad >= 0, best[ks] if len(smooth) else 0.0, self._best)
        j = vec.first_true((last >= cfg.nan_rise * ref) & (cfg.nan_rise * ref > 0))
        if k_rose is not None and (j is None or pos[k_rose + lag] < bad[j]):
            k = k_rose
            self._fired = (vec.item(col.steps, pos[k + lag]), float(smooth[k]), "rose")
        elif j is not None:
            k = int(k_bad[j])
            self._fired = (vec.item(col.steps, bad[j]), vec.item(col.values, bad[j]),
                           "turned non-finite after rising")
        else:  # nothing fires; a rise at the last point waits for the next
            k = len(smooth) - 1
            if k >= 0 and rose[k]:
                self._rising = (vec.item(col.steps, pos[k + lag]), float(smooth[k]))
        if k >= 0:
            self._initial = initial
            if best_at[k] >= 0:
                self._best, self._best_step = float(best[k]), vec.item(col.steps, pos[best_at[k] + lag])
            self._last = float(smooth[k])
            self._peak = max(self._peak, float(smooth[: k + 1].max()))
        if not self._fired:
            return []
        out = [self._finding(*self._fired)]
        self._peak = max(self._peak, peak)  # after firing, the peak goes on to the end
        return out

    def finish(self) -> Iterator[Finding]:
        if self._fired:  # the same finding, now with the run's peak in the evidence
            yield self._finding(*self._fired)

    def _finding(self, step: int, value: float, how: str) -> Finding:
        ratio = value / self._best if self._best > 0 and math.isfinite(value) else math.inf
        return finding(
            self.id, step=step,
            message=(
                f"the loss {how} to {fmt(value)} at step {step}: {fmt(ratio)}x its best "
                f"({fmt(self._best)} at step {self._best_step}) and against {fmt(self._initial or 0)} at "
                f"the start (threshold {fmt(self.config.factor)}x the best); it peaked at {fmt(self._peak)}."
                + phase_note(self)
            ),
            evidence={"loss": value, "peak": self._peak, "best": self._best, "best_step": self._best_step,
                      "initial": self._initial, "ratio": ratio, "threshold": self.config.factor},
        )

