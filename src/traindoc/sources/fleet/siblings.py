"""Runs compared with their siblings: the other runs of the same fleet at the same step.

In a sweep, a run whose loss sits far above every sibling's at the same step, or whose gradient
norm is orders of magnitude off theirs, is evidence even when nothing in the run alone looks
wrong. Each run's profile (``PROFILE_POINTS`` medians of its curve) is put on one step grid per
signal; at each grid step the siblings' median and spread are taken in log space (median
absolute deviation, robust to the outliers it looks for). A run is outside when it is

- ``factor`` times off the median (loss: 3x above; gradient norm: 10x above or below), and
- ``Z`` robust deviations off, with the spread never taken below 5 % (seed-to-seed noise), and
- so at ``SUSTAIN`` consecutive grid steps (one noisy point is no trend),
- for a loss, also above the median by 5 % of where the siblings started (a converged loss's
  ratios, 3e-4 against 1e-4, mean nothing),

with at least ``MIN_SIBLINGS`` siblings logging the signal at those steps. When the run already
has a finding about the same thing (a divergence, exploding gradients ...) the comparison is
added to its evidence; otherwise it is a ``sibling-outlier`` finding of its own. Signals with
values <= 0 (a loss that can be negative) are not compared: their ratios mean nothing.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Sequence

from traindoc.catalog import finding

if TYPE_CHECKING:
    import numpy as np

    from traindoc.sources.fleet import Run

MIN_SIBLINGS = 5
Z = 6.0
SPREAD_FLOOR = math.log(1.05)
SUSTAIN = 3
ABS_FLOOR = 0.05  # of the siblings' median loss at the first compared step
GRID = 64
# signal -> (factor, both directions, the ids whose findings it adds to, most related first)
LOSS_IDS = ("divergence", "stalled-loss", "constant-loss", "loss-spike", "nonfinite",
            "nan-hidden-by-logging", "bad-initial-loss")
GRAD_IDS = ("exploding-gradients", "vanishing-gradients", "nonfinite")
RULES: dict[str, tuple[float, bool, tuple[str, ...]]] = {
    "loss": (3.0, False, LOSS_IDS + GRAD_IDS),
    "grad_norm": (10.0, True, GRAD_IDS + LOSS_IDS),
}
_WHAT = {"loss": "loss", "grad_norm": "gradient norm"}


@dataclasses.dataclass(frozen=True)
class Outside:
    signal: str
    step: int
    value: float
    median: float  # the siblings' median at that step (the run itself left out)
    siblings: int
    factor: float  # the threshold


def compare(runs: Sequence[Run]) -> None:
    """Add the sibling evidence to every run of ``runs`` that sits outside its siblings."""
    for signal in RULES:
        for x in {r.x for r in runs}:
            group = [r for r in runs if r.error is None and r.x == x and signal in r.profile
                     and all(v > 0 for v in r.profile[signal][1])]
            if len(group) > MIN_SIBLINGS:
                for run, hit in _outside(group, signal):
                    _attach(run, hit)


def _outside(group: list[Run], signal: str) -> list[tuple[Run, Outside]]:
    import numpy as np

    factor, both, _ = RULES[signal]
    lo = min(r.profile[signal][0][0] for r in group)
    hi = max(r.profile[signal][0][-1] for r in group)
    if hi <= lo:
        return []
    grid = np.linspace(lo, hi, GRID)
    m = np.vstack([_on(grid, *r.profile[signal]) for r in group])  # runs x grid, log values
    present = np.isfinite(m)
    with np.errstate(all="ignore"):
        med = np.nanmedian(np.where(present, m, np.nan), axis=0)
        spread = np.maximum(1.4826 * np.nanmedian(np.abs(m - med), axis=0), SPREAD_FLOOR)
    enough = present.sum(axis=0) > MIN_SIBLINGS  # the run and at least MIN_SIBLINGS others
    limit = np.maximum(Z * spread, math.log(factor))
    dev = m - med
    if not both:
        # A loss must also be far above in plain numbers: at least 5% of where the siblings
        # started. Near a converged loss (1e-4 against 3e-4) ratios are large and mean nothing.
        first = int(np.argmax(enough)) if enough.any() else 0
        floor = ABS_FLOOR * math.exp(med[first]) if np.isfinite(med[first]) else 0.0
        with np.errstate(all="ignore"):
            dev = np.where(np.exp(m) - np.exp(med) >= floor, dev, 0.0)
    out: list[tuple[Run, Outside]] = []
    for i, run in enumerate(group):
        with np.errstate(invalid="ignore"):
            above = enough & present[i] & (dev[i] > limit)
            below = enough & present[i] & (dev[i] < -limit) if both else np.zeros_like(above)
        for hit in (above, below):
            j = _first_streak(hit)
            if j is None:
                continue
            others = np.delete(m[:, j], i)
            others = others[np.isfinite(others)]
            out.append((run, Outside(signal, int(round(grid[j])), float(math.exp(m[i, j])),
                                     float(math.exp(np.median(others))), len(others), factor)))
            break
    return out


def _on(grid: np.ndarray, steps: list[int], values: list[float]) -> np.ndarray:
    """A profile's log values at the grid steps it covers (NaN outside its steps)."""
    import numpy as np

    s = np.asarray(steps, dtype=np.float64)
    v = np.log(np.asarray(values, dtype=np.float64))
    out = np.interp(grid, s, v)
    out[(grid < s[0]) | (grid > s[-1])] = np.nan
    return out


def _first_streak(hit: np.ndarray) -> int | None:
    run = 0
    for j, h in enumerate(hit.tolist()):
        run = run + 1 if h else 0
        if run == SUSTAIN:
            return j - SUSTAIN + 1
    return None


def _attach(run: Run, hit: Outside) -> None:
    what = _WHAT[hit.signal]
    ratio = hit.value / hit.median
    times = f"{ratio:.3g}x"
    sentence = (f"Its {what} {hit.value:.4g} at {run.x} {hit.step} is {times} the median of its "
                f"{hit.siblings} siblings at that {run.x} ({hit.median:.4g}; threshold {hit.factor:g}x "
                f"and {Z:g} robust deviations, sustained over {SUSTAIN} of {GRID} points of the sweep).")
    evidence = {"step": float(hit.step), "value": hit.value, "sibling_median": hit.median,
                "siblings": float(hit.siblings), "ratio": ratio, "threshold": hit.factor}
    related = RULES[hit.signal][2]
    run.amended = True
    for id_ in related:
        for k, f in enumerate(run.findings):
            if f.id == id_:
                run.findings[k] = dataclasses.replace(
                    f, message=f"{f.message} {sentence}",
                    evidence={**f.evidence, f"siblings_{hit.signal}": evidence})
                return
    if any(f.id == "sibling-outlier" for f in run.findings):
        return  # the loss already said it; one finding per id
    message = sentence[len("Its "):]
    run.findings.append(finding(
        "sibling-outlier", message=message[0].upper() + message[1:], step=hit.step,
        evidence={"signal": hit.signal, **evidence}))
