"""train-val-divergence: the validation loss rises over a long window while the training loss
keeps falling."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import Thinned, median
from traindoc.events import Event, Scalar
from traindoc.findings import Finding


def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The median of pairwise slopes: a trend that one outlier cannot flip."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i])
              for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]]
    return median(slopes)


_CAP = 512  # evaluations after the best kept (evenly spread); exact below this


def _columns() -> tuple[Thinned, Thinned, Thinned]:
    return Thinned(_CAP), Thinned(_CAP), Thinned(_CAP)


class TrainValDivergence(Detector):
    """After the lowest validation loss, over at least ``window`` evaluations, the robust
    (Theil-Sen) slope of the validation loss is upward and that of the training loss (averaged
    between evaluations) downward. The fitted validation rise must exceed ``noise`` times the
    noise of one evaluation (from successive differences) and end ``min_rise`` above the best
    level (a median around the minimum, which noise pulls down), and the fitted training drop
    must reach ``train_drop`` of its level, at ``persist`` evaluations in a row: noisy flat
    curves stay quiet (tests/logs/test_logs_detectors.py measures the false-alarm rate). The
    slopes are fitted on ``max_points`` evaluations spread evenly over the window; past 512
    evaluations after the best, on the nearest of an even sample of them that is kept.
    """

    id = "train-val-divergence"
    needs = frozenset({"loss", "val_loss"})
    examples = (
        Example("fixtures/logs/golden/train_val_divergence.jsonl", 6900),
        Example("fixtures/logs/golden/healthy_val_loss.jsonl", None),
        Example("zoo/healthy_noisy_labels_early_stopping_tensorboard.py", None),
        Example("zoo/healthy_char_lm_annealed.py", None),
    )

    # Carried over a resume: the training loss since the last evaluation, the best validation loss
    # and the evaluations after it (bounded samples), the streak and where it fired.
    carry = ("_sum", "_count", "_last_train", "_best", "_before_best", "_after", "_last", "_recent",
                "_fired", "_streak", "_stats")

    @dataclass(frozen=True)
    class Config:
        window: int = 8  # evaluations after the best one
        min_rise: float = 0.05
        noise: float = 4.0  # the fitted rise over the window, in evaluation-to-evaluation noise
        min_noise: int = 8  # second differences needed to estimate that noise
        train_drop: float = 0.01
        max_points: int = 30  # a longer window is subsampled evenly to this many evaluations
        persist: int = 2  # evaluations in a row that must meet the conditions

        def __post_init__(self) -> None:
            require(self, window=">= 3")
            if self.max_points < self.window:
                raise ValueError("max_points must be >= window")
            require(self, persist=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._sum = 0.0  # training loss since the previous evaluation
        self._count = 0
        self._last_train = math.nan
        # The evaluations, bounded however many there are: the lowest (best) and the one before
        # it, those after it (step, val_loss, mean training loss before it: a Thinned sample of
        # each, fed in step, exact up to _CAP evaluations), the latest, and the last 200 val_loss.
        self._best: tuple[int, float] | None = None  # (step, val_loss)
        self._before_best: float | None = None
        self._after = _columns()
        self._last: tuple[int, float, float] = (0, math.nan, math.nan)
        self._recent: deque[float] = deque(maxlen=200)
        self._fired: int | None = None
        self._streak = 0  # consecutive evaluations that met the conditions
        self._stats: dict[str, float] = {}

    def observe(self, event: Event) -> Iterable[Finding]:
        assert isinstance(event, Scalar)
        x = event.value
        if event.name == "loss":
            if x == x and x not in (math.inf, -math.inf):
                self._sum += x
                self._count += 1
            return ()
        if not math.isfinite(x):
            return ()
        train = self._sum / self._count if self._count else self._last_train
        self._last_train = train
        self._sum, self._count = 0.0, 0
        if self._best is None or x < self._best[1]:
            self._before_best = self._last[1] if self._best is not None else None
            self._best, self._after = (event.step, x), _columns()
        else:
            for column, v in zip(self._after, (event.step, x, train)):
                column.append(v)
        self._last = (event.step, x, train)
        self._recent.append(x)
        if self._fired is not None:
            return ()
        self._streak = self._streak + 1 if self._diverging() else 0
        if self._streak >= self.config.persist:
            self._fired = event.step
            return (self._finding(),)
        return ()

    def finish(self) -> Iterable[Finding]:
        if self._fired is None:
            return ()
        kept = self._stats
        if not self._diverging():  # refresh the evidence if the rise still holds at the end
            self._stats = kept
        return (self._finding(),)

    def _diverging(self) -> bool:
        cfg = self.config
        assert self._best is not None
        best_step, best = self._best
        # The minimum itself is left out: noise put it low, and a trend fitted from it would
        # rise by regression to the mean.
        n = self._after[0].count
        now_step, now, now_train = self._last
        if n < cfg.window or now < best + cfg.min_rise * abs(best):
            return False  # the cheap test first: most evaluations stop here
        rows = self._window(n)
        steps = [float(s) for s, _, _ in rows]
        val = [v for _, v, _ in rows]
        pairs = [(float(s), t) for s, _, t in rows if t == t]
        if len(pairs) < cfg.window:
            return False
        vs = theil_sen(steps, val)
        ts = theil_sen([s for s, _ in pairs], [t for _, t in pairs])
        span = steps[-1] - steps[0]
        rise = vs * span
        # The noise of one evaluation, from second differences of the recent series (a level
        # and a slope cancel out; var(x[i-1] - 2 x[i] + x[i+1]) = 6 var(x)); and the best level
        # as a median around the minimum, since the minimum of noisy values sits below it.
        recent = list(self._recent)
        d2 = [a - 2 * b + c for a, b, c in zip(recent, recent[1:], recent[2:])]
        if len(d2) < cfg.min_noise:
            return False  # too few evaluations to know the noise
        scatter = 1.4826 * median([abs(d) for d in d2]) / math.sqrt(6)
        level = median([v for v in (self._before_best, best, self._after[1].values[0]) if v is not None])
        end = median([v - vs * s for s, v in zip(steps, val)]) + vs * steps[-1]
        train_level = median([t for _, t in pairs])
        drop = -ts * span
        self._stats = {"val_slope": vs, "train_slope": ts, "rise": rise, "scatter": scatter,
                       "train_drop": drop, "evaluations": n, "best": best, "level": level,
                       "best_step": best_step, "now": now, "now_step": now_step, "gap": now - now_train}
        return (vs > 0 and ts < 0 and rise > cfg.noise * scatter and end >= (1 + cfg.min_rise) * level
                and rise >= cfg.min_rise * abs(level) and drop >= cfg.train_drop * abs(train_level))

    def _window(self, n: int) -> list[tuple[float, float, float]]:
        """The ``n`` evaluations after the best, subsampled evenly to ``max_points`` (the slopes
        are O(n^2)): (step, val_loss, train loss). Past _CAP of them, each is the kept one
        nearest to its place (the latest is always known)."""
        cfg = self.config
        places = (sorted({round(i * (n - 1) / (cfg.max_points - 1)) for i in range(cfg.max_points)})
                  if n > cfg.max_points else range(n))
        steps, val, train = (c.values for c in self._after)
        stride = self._after[0].stride
        rows: dict[int, tuple[float, float, float]] = {}
        for place in places:
            if place == n - 1:
                rows[place] = self._last
            else:
                k = min(round(place / stride), len(steps) - 1)
                rows[k * stride] = (steps[k], val[k], train[k])
        return list(rows.values())

    def _finding(self) -> Finding:
        st = self._stats
        step = self._fired if self._fired is not None else self._last[0]
        gap = st["gap"]
        return finding(
            self.id, step=step,
            message=(
                f"val_loss rose from its best {fmt(st['best'])} (step {int(st['best_step'])}) to "
                f"{fmt(st['now'])} at step {int(st['now_step'])} over the {int(st['evaluations'])} evaluations after it "
                f"(robust trend {fmt(st['rise'])}, {st['rise'] / abs(st['level']):+.0%} of the best level "
                f"{fmt(st['level'])}; thresholds {self.config.min_rise:.0%} and {fmt(self.config.noise)}x the "
                f"evaluation noise {fmt(st['scatter'])}), "
                f"while the training loss fell by {fmt(st['train_drop'])} over the same window; "
                f"latest gap val - train = {fmt(gap)}."
            ),
            fix=(
                f"Keep the checkpoint with the lowest val_loss (step {int(st['best_step'])}) and stop "
                "early with a patience of a few evaluations; add weight decay, dropout or "
                "augmentation, or more data; evaluate a held-out slice of the training set through "
                "the validation pipeline to rule out a mismatch."
            ),
            evidence={"best_val_loss": st["best"], "best_step": int(st["best_step"]),
                      "val_loss": st["now"], "val_slope": st["val_slope"],
                      "train_slope": st["train_slope"], "evaluations": int(st["evaluations"]),
                      "gap": gap},
        )
