"""train-val-divergence: the validation loss rises over a long window while the training loss
keeps falling."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Iterable, Sequence

from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar
from traindoc.findings import Finding


def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The median of pairwise slopes: a trend that one outlier cannot flip."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i])
              for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]]
    return median(slopes)


class TrainValDivergence:
    """From the lowest validation loss on, over at least ``window`` evaluations, the robust
    (Theil-Sen) slope of the validation loss is upward and that of the training loss (averaged
    between evaluations) downward. The fitted validation rise must exceed ``min_rise`` of the
    best value and ``noise`` times the evaluation-to-evaluation scatter around the fit, and the
    fitted training drop ``train_drop`` of its level, so noise and flat curves stay quiet.
    """

    id: ClassVar[str] = "train-val-divergence"
    needs: ClassVar[frozenset[str]] = frozenset({"loss", "val_loss"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("fixtures/logs/golden/train_val_divergence.jsonl", 5100),
        Example("fixtures/logs/golden/healthy_val_loss.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        window: int = 5  # evaluations, counting the best one
        min_rise: float = 0.05
        noise: float = 2.0
        train_drop: float = 0.01
        max_points: int = 30  # a longer window is subsampled evenly to this many evaluations

        def __post_init__(self) -> None:
            if self.window < 3:
                raise ValueError(f"window must be >= 3, got {self.window}")
            if self.max_points < self.window:
                raise ValueError("max_points must be >= window")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._sum = 0.0  # training loss since the previous evaluation
        self._count = 0
        self._last_train = math.nan
        self._steps: list[int] = []
        self._val: list[float] = []
        self._train: list[float] = []  # mean training loss before each evaluation
        self._best = 0  # index of the lowest validation loss
        self._fired: int | None = None
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
        self._steps.append(event.step)
        self._val.append(x)
        self._train.append(train)
        if x < self._val[self._best]:
            self._best = len(self._val) - 1
        if self._fired is None and self._diverging():
            self._fired = event.step
            return (self._finding(),)
        return ()

    def finish(self) -> Iterable[Finding]:
        if self._fired is not None:
            self._diverging()  # refresh the evidence over the final window
            return (self._finding(),)
        return ()

    def _diverging(self) -> bool:
        cfg = self.config
        best = self._val[self._best]
        n = len(self._val) - self._best
        if n < cfg.window or self._val[-1] < best + cfg.min_rise * abs(best):
            return False  # the cheap test first: most evaluations stop here
        # The window from the best evaluation on, subsampled evenly (the slopes are O(n^2)).
        idx = sorted({self._best + round(i * (n - 1) / (cfg.max_points - 1)) for i in range(cfg.max_points)}
                     if n > cfg.max_points else range(self._best, len(self._val)))
        steps = [float(self._steps[i]) for i in idx]
        val = [self._val[i] for i in idx]
        pairs = [(steps[k], self._train[i]) for k, i in enumerate(idx) if self._train[i] == self._train[i]]
        if len(pairs) < cfg.window:
            return False
        vs = theil_sen(steps, val)
        ts = theil_sen([s for s, _ in pairs], [t for _, t in pairs])
        span = steps[-1] - steps[0]
        rise = vs * span
        fit0 = median([v - vs * s for s, v in zip(steps, val)])
        scatter = 1.4826 * median([abs(v - (fit0 + vs * s)) for s, v in zip(steps, val)])
        train_level = median([t for _, t in pairs])
        drop = -ts * span
        self._stats = {"val_slope": vs, "train_slope": ts, "rise": rise, "scatter": scatter,
                       "train_drop": drop, "evaluations": n, "best": best,
                       "best_step": self._steps[self._best]}
        return (vs > 0 and ts < 0 and rise >= cfg.min_rise * abs(best) and rise > cfg.noise * scatter
                and drop >= cfg.train_drop * abs(train_level) and val[-1] > best)

    def _finding(self) -> Finding:
        st = self._stats
        step = self._fired if self._fired is not None else self._steps[-1]
        gap = self._val[-1] - self._train[-1]
        return finding(
            self.id, step=step,
            message=(
                f"val_loss rose from its best {fmt(st['best'])} (step {int(st['best_step'])}) to "
                f"{fmt(self._val[-1])} at step {self._steps[-1]} over {int(st['evaluations'])} evaluations "
                f"(robust trend {fmt(st['rise'])}, {st['rise'] / abs(st['best']):+.0%}; thresholds "
                f"{self.config.min_rise:.0%} and {fmt(self.config.noise)}x the scatter {fmt(st['scatter'])}), "
                f"while the training loss fell by {fmt(st['train_drop'])} over the same window; "
                f"latest gap val - train = {fmt(gap)}."
            ),
            cause=(
                "Overfitting (little data for the model, many epochs, weak regularization), or a "
                "train/validation pipeline mismatch (normalization, resolution, tokenization), or "
                "validation drawn from a different distribution."
            ),
            fix=(
                f"Keep the checkpoint with the lowest val_loss (step {int(st['best_step'])}) and stop "
                "early with a patience of a few evaluations; add weight decay, dropout or "
                "augmentation, or more data; evaluate a held-out slice of the training set through "
                "the validation pipeline to rule out a mismatch."
            ),
            evidence={"best_val_loss": st["best"], "best_step": int(st["best_step"]),
                      "val_loss": self._val[-1], "val_slope": st["val_slope"],
                      "train_slope": st["train_slope"], "evaluations": int(st["evaluations"]),
                      "gap": gap},
        )
