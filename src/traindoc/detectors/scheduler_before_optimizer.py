"""scheduler-before-optimizer: the LR schedule starts one step in, as when
``scheduler.step()`` ran before the first ``optimizer.step()``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.events import Event, SchedulerStep, Series
from traindoc.findings import Finding


def cosine_offset(lrs: list[float]) -> tuple[float, float, float, float, float] | None:
    """Fit ``lr_k = A - B cos(w (k + s))`` to a rising warmup ``lrs`` (k = 0, 1, ...).

    Returns (s, A, B, w, max residual relative to the peak), or None when the curve is not a
    cosine ramp. ``A - B`` is the schedule's intended first LR, ``A + B`` its peak (max_lr). ``s`` is how many schedule steps had already been taken when
    the first value was logged: 0 for a correct loop, 1 when ``scheduler.step()`` ran once
    before training. Exact for noise-free LRs: the increments ``d_k`` of a sinusoid satisfy
    ``d_{k-1} + d_{k+1} = 2 cos(w) d_k``, which gives w; ``d_1 / d_0`` then gives the phase
    (``sin(w (1.5 + s)) / sin(w (0.5 + s))``). Linear, quadratic and exponential ramps have
    ``cos(w) >= 1`` and return None.
    """
    d = [b - a for a, b in zip(lrs, lrs[1:])]
    if len(d) < 3 or min(d) <= 0:
        return None
    num = sum((d[k - 1] + d[k + 1]) * d[k] for k in range(1, len(d) - 1))
    den = 2 * sum(d[k] ** 2 for k in range(1, len(d) - 1))
    c = num / den
    if not -1 < c < 1 - 1e-6:
        return None
    w = math.acos(c)
    x0 = math.atan2(math.sin(w), d[1] / d[0] - c)  # = w (0.5 + s), in (0, pi)
    s = x0 / w - 0.5
    b = d[0] / (2 * math.sin(x0) * math.sin(w / 2))
    a = lrs[0] + b * math.cos(w * s)
    peak = max(lrs)
    resid = max(abs(a - b * math.cos(w * (k + s)) - v) for k, v in enumerate(lrs)) / peak
    return s, a, b, w, resid


class SchedulerBeforeOptimizer(Detector):
    """The logged LR starts with a cosine warmup (OneCycleLR's shape) whose fitted phase says
    the first logged value is the schedule's value one (or two) steps in: the log shows
    ``schedule(1)`` where ``schedule(0)`` belongs. Fires only when the intended first LR is
    well above 0 (``min_start`` of the peak, as OneCycleLR's ``max_lr / div_factor``), the
    first logged LR exceeds it by ``min_ratio``, and the fit is exact to ``tolerance``: linear
    warmups and warmups from 0 (where starting one step in is often deliberate) stay quiet,
    and so does a per-batch schedule over thousands of steps (the offset is then negligible).
    Needs the LR from the first step, at a constant step interval. The LR arrives in columns
    (``observe_series``: a log's whole, live Scalars in the engine's small columns), read point
    by point only while the warmup lasts: a million-row log costs its first rows.

    Live, the order is observed directly (``SchedulerStep``): a scheduler's step() before its
    optimizer's first step() fires, with the LR the first step used against the schedule's
    first value, and the fit above is not used. Calls made after an AMP GradScaler skipped the
    optimizer's first step (Inf/NaN gradients) are PyTorch's own false alarm and stay quiet, and
    so does a schedule that starts at LR 0 (skipping a step with LR 0 is often deliberate).
    """

    id = "scheduler-before-optimizer"
    needs = frozenset({"lr"})
    uses = frozenset({"scheduler"})
    examples = (
        Example("zoo/onecycle_prestep.py", 0),
        Example("zoo/healthy_cnn_bn.py", None),
        Example("live/golden/onecycle_prestep.jsonl", 0),
        Example("live/golden/amp_skipped_first_step.jsonl", None),
        Example("fixtures/logs/golden/onecycle_prestepped.jsonl", 0),
        Example("fixtures/logs/golden/onecycle_correct.jsonl", None),
        Example("fixtures/logs/golden/linear_warmup.jsonl", None),
    )

    # Carried over a resume: the warmup's LRs so far (at most max_points) and whether it was judged:
    # a resumed run's first LRs are not a warmup.
    carry = ("_lrs", "_first_step", "_last_step", "_interval", "_done", "_live_fired")

    @dataclass(frozen=True)
    class Config:
        min_ratio: float = 1.2  # first logged LR / intended first LR
        min_start: float = 0.005  # intended first LR / peak
        tolerance: float = 2e-3  # largest fit residual, relative to the peak
        max_points: int = 100_000  # give up on a warmup longer than this

        def __post_init__(self) -> None:
            require(self, min_ratio="> 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._lrs: list[float] = []  # the warmup so far (at most max_points)
        self._first_step = 0
        self._last_step = 0
        self._interval = 0  # steps between logged LRs (0: fewer than two yet)
        self._done = False
        self._live_fired = False

    def observe(self, event: Event) -> Iterable[Finding]:
        assert isinstance(event, SchedulerStep)  # its numbers come as columns
        return self._order(event)

    def observe_series(self, columns: dict[str, Series]) -> Iterable[Finding]:
        """The next points of the lr column, point by point while the warmup lasts: only a
        column's head is read (a million-row log's warmup ends within its first rows)."""
        from traindoc.detectors import _vector as vec

        col = columns.get("lr")
        if col is None:
            return ()
        start, size = 0, 64
        while not self._done and start < len(col):
            part = slice(start, start + size)
            for step, x in zip(vec.items(col.steps, part), vec.items(col.values, part)):
                found = self._point(step, x)
                if self._done:
                    return found
            start, size = start + size, 4 * size
        return ()

    def _point(self, step: int, x: float) -> Iterable[Finding]:
        """One LR of the warmup: kept while finite, strictly rising, at a constant step
        interval and at most ``max_points``; the first one that is not ends it and it is judged."""
        lrs, gap = self._lrs, step - self._last_step
        if not math.isfinite(x) or lrs and (
                not x > lrs[-1] or len(lrs) >= self.config.max_points or gap <= 0
                or len(lrs) > 1 and gap != self._interval):
            self._done = True  # the warmup ended (or is not one)
            return self._judge()
        if not lrs:
            self._first_step = step
        elif len(lrs) == 1:
            self._interval = gap
        self._last_step = step
        lrs.append(x)
        return ()

    def finish(self) -> Iterable[Finding]:
        if self._done:
            return ()
        self._done = True
        return self._judge()

    def _judge(self) -> Iterable[Finding]:
        cfg = self.config
        lrs = self._lrs
        if len(lrs) < 4 or self._first_step != 0 or not lrs[0] > 0:
            return ()
        fit = cosine_offset(lrs)
        if fit is None:
            return ()
        s, a, b, w, resid = fit
        n = round(s)
        start = a - b
        if not (1 <= n <= 2 and abs(s - n) <= 0.15 and resid <= cfg.tolerance
                and start >= cfg.min_start * max(lrs) and lrs[0] >= cfg.min_ratio * start):
            return ()
        return (self._finding(s, start, a + b, w),)

    def _finding(self, s: float, start: float, max_lr: float, w: float) -> Finding:
        n = round(s)
        ratio = self._lrs[0] / start
        steps_to_peak = math.pi / w  # lr(t) = A - B cos(w t) peaks at t = pi / w
        div_text = f"; max_lr/start = {fmt(max_lr / start)}" + (
            " (OneCycleLR's default div_factor=25)" if abs(max_lr / start - 25) <= 0.5 else "")
        unit = self._interval
        return finding(
            self.id, step=self._first_step,
            message=(
                f"the first logged LR is {fmt(self._lrs[0])} at step {self._first_step}, "
                f"{fmt(ratio)}x the {fmt(start)} its warmup curve starts from: the LR is a cosine "
                f"warmup (max_lr about {fmt(max_lr)} after {fmt(steps_to_peak * unit)} steps{div_text}) "
                f"whose logged values are the schedule's {n} step{'s' if n > 1 else ''} later "
                f"(fitted offset {s:.2f}, residual under {fmt(self.config.tolerance)} of the peak)."
            ),
            evidence={"first_lr": self._lrs[0], "intended_first_lr": start, "ratio": ratio,
                      "offset_steps": s, "max_lr": max_lr, "warmup_points": len(self._lrs)},
        )

    # ---- live: the order of the calls, observed ------------------------------------------------
    def _order(self, e: SchedulerStep) -> Iterable[Finding]:
        self._done = True  # the observed order replaces the fit of the LR curve
        if self._live_fired or e.early - e.skipped <= 0 or e.lr_start == 0:
            return ()
        self._live_fired = True  # report the first scheduler only
        n = e.early - e.skipped
        calls = f"{n} time{'s' if n > 1 else ''}"
        where = f" at {e.where}" if e.where else ""
        if math.isfinite(e.lr_first) and math.isfinite(e.lr_start) and e.lr_start > 0:
            ratio = e.lr_first / e.lr_start
            if abs(ratio - 1) > 1e-6:
                used = (f"the schedule starts at {fmt(e.lr_start)} but the first optimizer step used "
                        f"{fmt(e.lr_first)} ({fmt(ratio)}x)")
            elif math.isfinite(e.lr_after) and abs(e.lr_after / e.lr_start - 1) > 1e-6:
                used = (f"the first optimizer step used {fmt(e.lr_first)}, the schedule's first value, "
                        f"only because the LR was set back by hand (the early call had moved it to "
                        f"{fmt(e.lr_after)})")
            else:  # a schedule flat at its start (StepLR): the shift shows at its first change
                used = (f"the first optimizer step used {fmt(e.lr_first)}, the schedule's first value, "
                        "only because the schedule does not change there yet")
        else:
            ratio = math.nan
            used = f"the schedule's first value {fmt(e.lr_start)} was skipped"
        skipped = (f" ({e.skipped} more call{'s' if e.skipped > 1 else ''} followed a step the "
                   "GradScaler skipped and are not counted)" if e.skipped else "")
        return (finding(
            self.id, step=0,
            message=(
                f"{e.scheduler}.step() ran {calls} before the first {e.optimizer}.step(){where}: "
                f"{used}; every later LR of the schedule comes {n} step{'s' if n > 1 else ''} "
                f"early{skipped}."
            ),
            cause=(
                f"scheduler.step() is called before optimizer.step() (the pre-1.1 loop order), or "
                f"the {e.scheduler} is 'pre-stepped' after it is built, e.g. to silence PyTorch's "
                "warning. PyTorch then skips the schedule's first value; a per-epoch OneCycleLR "
                "starts at about twice max_lr / div_factor."
            ),
            fix=(
                f"Remove the early call{where} and keep the order loss.backward() -> "
                f"{e.optimizer}.step() -> scheduler.step(); do not reset the LR by hand. Step "
                "per-batch schedules (OneCycleLR) per batch with total_steps=epochs * len(loader). "
                "scheduler.get_last_lr() before the first step should be the schedule's start "
                f"({fmt(e.lr_start)})."
            ),
            evidence={"scheduler": e.scheduler, "optimizer": e.optimizer, "early_calls": n,
                      "calls_after_scaler_skip": e.skipped, "intended_first_lr": e.lr_start,
                      "first_step_lr": e.lr_first, "lr_after_early_calls": e.lr_after,
                      "ratio": ratio},
            where=[e.where] if e.where else [],
        ),)
