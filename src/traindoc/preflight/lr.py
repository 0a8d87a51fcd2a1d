"""The LR probe: a short sweep of constant LRs around the configured one, on one repeated batch.

Each launch of the sweep trains the script's own model, loss and optimizer on the repeated
batch for ``steps`` steps at a constant LR, a factor of the grid times the configured (base)
LR: the schedule's ``initial_lr``, else the LR the optimizer was built with, so that a warmup
does not hide the LR the script means. The sweep starts at 1x and walks the grid outwards only
as far as the verdict and "where does the loss fall fastest" need (``next_factor``): up while
the loss has not started to fall or still falls faster, down while it rises. The judgement is deliberately loose, because on one
batch the loss falls fastest at LRs far above the ones that generalise: the configured LR fails
only when the loss barely moves at it while it falls at LRs all above it (far below), or rises at
it while it falls at LRs all below it (far above).
"""

from __future__ import annotations

import math

from traindoc.catalog import finding
from traindoc.findings import fmt
from traindoc.preflight.result import Result
from traindoc.preflight.verdict import FAIL, NOT_APPLICABLE, PASS, Verdict

# The LR range in which each optimizer family usually trains, from its defaults and published
# recipes: AdamW 1e-5 (fine-tuning) to 1e-2 (small nets), torch's SGD from 1e-4 to ResNet's 0.1
# x batch/256, Muon's 0.02-0.05 (Keller Jordan's) down to torch's default 1e-3, Adafactor
# at T5's constant 1e-3 and torch's default 1e-2, Lion 3-10x below AdamW (its paper). Quoted in
# messages only; the sweep, not the band, decides a verdict.
LR_BANDS: dict[str, tuple[float, float]] = {
    "SGD": (1e-4, 1.0), "Adam": (1e-5, 1e-2), "AdamW": (1e-5, 1e-2), "NAdam": (1e-5, 1e-2),
    "RAdam": (1e-5, 1e-2), "Adamax": (1e-5, 1e-2), "RMSprop": (1e-5, 1e-2), "Adagrad": (1e-3, 1e-1),
    "Adafactor": (1e-4, 1e-2), "Lion": (1e-6, 1e-3), "Muon": (1e-3, 1e-1),
}
# The configured LR times these (the walk picks among them); a launch that diverges ends early.
GRID: tuple[float, ...] = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)
BELOW = 10.0  # "far below": the loss falls only at factors above this
FALLS = 0.9  # the loss falls at an LR when after the sweep's steps it is below this share of its first


def band(optimizer: str, options: dict[str, object]) -> tuple[float, float] | None:
    """The usual LR range of ``optimizer`` given its constructor options (``opt.defaults``)."""
    if optimizer == "Muon" and options.get("adjust_lr_fn") == "match_rms_adamw":
        return LR_BANDS["AdamW"]  # this scaling makes Muon's LR an AdamW LR (Moonlight)
    return LR_BANDS.get(optimizer)


def no_lr(r: Result) -> str:
    """Why the sweep cannot apply to the optimizer of ``r``, or ""."""
    if r.opposed():
        return r.opposed()
    if r.lrs and not all(math.isfinite(lr) for _, lr in r.lrs):
        return (f"{r.lrs[0][0]} has no numeric LR (lr=None: Adafactor with relative_step=True sets its own step "
                "size), so there is no LR to sweep; set relative_step=False and an lr to have it checked")
    return ""


def next_factor(ratios: dict[float, float], grid: tuple[float, ...]) -> float | None:
    """The next factor of ``grid`` to launch, given the loss ratios measured so far (1x first)."""
    if 1.0 not in ratios:
        return 1.0
    if math.isnan(ratios[1.0]):
        return None  # the configured LR did not run: the others cannot be judged against it
    ups = sorted(f for f in ratios if f >= 1)
    top, below_top = ups[-1], ratios[ups[-2]] if len(ups) > 1 else math.inf
    rising = not ratios[1.0] <= 1.0
    higher = [f for f in grid if f > top]
    searching = all(ratios[f] > FALLS for f in ups)  # the loss has not fallen at any of them yet
    # up: until the loss falls, then while it falls faster; never from an LR where it rises
    if higher and not rising and ratios[top] <= 1.0 and (searching or ratios[top] < below_top):
        return higher[0]
    downs = sorted(f for f in ratios if f < 1)
    lower = [f for f in grid if f < (downs[0] if downs else 1.0)]
    if not lower:
        return None
    if rising:  # down until it falls
        return lower[-1] if not downs or ratios[downs[0]] > FALLS else None
    # falling at 1x: one factor below, to show where the range starts; a plateau: lower LRs move even less
    return lower[-1] if ratios[1.0] <= FALLS and not downs else None


def sweep(curves: dict[float, Result], steps: int, halve: float) -> Verdict:
    """``curves``: LR factor -> the launch on the repeated batch at that constant LR."""
    base = curves.get(1.0)
    if base is None or not base.batch_repeated() or len(base.losses) < 2:
        why = (base.error if base is not None and base.error else "") or \
            "no launch could repeat one batch (see the overfit probe)"
        return Verdict("lr", NOT_APPLICABLE, why)
    ratios = {sc: ratio(r, steps) for sc, r in curves.items()}
    if any(math.isnan(v) for v in ratios.values()):
        return Verdict("lr", NOT_APPLICABLE, "a launch at another LR did not run: " + "; ".join(
            r.error or r.status for r in curves.values() if r.error or r.status == "timeout")[:300])
    opt, lr = base.lrs[0] if base.lrs else ("the optimizer", math.nan)
    usual = band(opt, base.lr_options)
    in_band = f"; its usual range is {fmt(usual[0])}-{fmt(usual[1])}" if usual else ""
    shown = ", ".join(f"{_share(ratios[sc])} at {sc:g}x" for sc in sorted(ratios))
    falls = [sc for sc in sorted(ratios) if ratios[sc] <= FALLS]
    fastest = min(sorted(ratios), key=lambda sc: ratios[sc])
    where = (f"the loss falls at {_span(falls)} the LR, fastest at {fastest:g}x ({fmt(lr * fastest)})"
             if falls else "the loss falls at none of them")
    summary = (f"{opt} at lr {fmt(lr)}{in_band}. Loss after {steps} steps on one repeated batch at a constant "
               f"LR, over its first value: {shown}; {where}")
    if ratios[1.0] <= FALLS:
        return Verdict("lr", PASS, summary)
    if not falls:
        return Verdict("lr", NOT_APPLICABLE, f"the loss fell by less than {1 - FALLS:.0%} at every LR from "
                       f"{min(ratios):g}x to {max(ratios):g}x the configured {fmt(lr)}: the LR is not what keeps "
                       "it from falling (see the overfit probe)")
    halves = [sc for sc in falls if ratios[sc] <= halve]
    # far below: not even 10x makes it fall (a plateau at init can hold the configured LR near
    # the 10% line for these few steps in a healthy transformer, where 10x then races ahead)
    if all(sc > BELOW for sc in falls) and halves:
        direction = "below"
        fix = (f"Raise the LR: {halves[0]:g}x ({fmt(lr * halves[0])}) is the smallest factor that halved the loss "
               f"here; tune from there{', staying inside the usual range' if usual else ''}.")
    elif all(sc < 1 for sc in falls) and not ratios[1.0] <= 1.0:
        direction = "above"
        fix = (f"Lower the LR: at {falls[-1]:g}x ({fmt(lr * falls[-1])}) the loss fell; keep a warmup, and clip "
               "gradients while tuning.")
    else:
        return Verdict("lr", PASS, summary)
    f = finding(
        "lr-out-of-range", step=0,
        message=(f"{opt} at lr {fmt(lr)}{in_band} is far {direction} the range where the loss falls: after "
                 f"{steps} steps on one repeated batch at a constant LR the loss is {shown} the configured LR; "
                 f"{where}."),
        fix=fix,
        evidence={"optimizer": opt, "lr": lr, "steps": steps, "fastest_factor": fastest,
                  "loss_ratio_by_lr_factor": {f"{sc:g}x": v for sc, v in sorted(ratios.items())}},
    )
    return Verdict("lr", FAIL, summary, (f,))


def _span(factors: list[float]) -> str:
    if len(factors) == 1:
        return f"{factors[0]:g}x"
    return f"{factors[0]:g}x to {factors[-1]:g}x"


def _share(ratio: float) -> str:
    return fmt(ratio) if math.isfinite(ratio) else "non-finite"


def ratio(r: Result, steps: int) -> float:
    """The loss after ``steps`` steps on the repeated batch (best of the last 3) over its first
    value; inf when it went non-finite or the launch ended on divergence, NaN when the launch did
    not run or did not repeat."""
    start = r.repeat_start
    losses = r.losses[start:start + steps]
    if r.error or not r.batch_repeated() or not losses or not losses[0] > 0:
        return math.nan
    if len(losses) < 2:  # no optimizer step after the first (fp16: a GradScaler skipping every step)
        return math.inf
    if not all(math.isfinite(v) for v in losses):
        return math.inf
    if len(losses) < steps and r.status == "stopped":  # ended early: it diverged (launch.DIVERGED)
        return losses[-1] / losses[0]
    return min(losses[-3:]) / losses[0]
