"""Synthetic runs for the (detector x format) tests: one healthy run that logs every signal the
logs face reads, and for each logs detector the same run with that detector's failure planted.

300 optimizer steps; training signals every step, evaluations every 20 steps, the LR every 10
steps (one value per "epoch" of a per-epoch OneCycleLR, seed 004's schedule). Values are smooth
curves with seeded noise, so every format carries the same numbers (TensorBoard as float32).
"""

from __future__ import annotations

import math
import random
from typing import Callable

from log_writers import Run

STEPS = 300
EVAL_EVERY = 20
LR_EVERY = 10


def onecycle(prestep: bool, n: int = 30, max_lr: float = 0.8) -> list[float]:
    """torch's OneCycleLR (cosine anneal, div 25, final_div 1e4, 9 warmup epochs) over ``n``
    epochs; ``prestep``: scheduler.step() called once before training (seed 004), with
    total_steps one larger so that the schedule does not run out."""
    total = n + 1 if prestep else n
    start, low = max_lr / 25, max_lr / 25 / 1e4
    peak_at, end_at = 9 - 1, total - 1  # pct_start = 9 / total

    def cos(a: float, b: float, f: float) -> float:
        return b + (a - b) / 2 * (math.cos(math.pi * f) + 1)

    out = []
    for k in range(n):
        t = k + 1 if prestep else k
        out.append(cos(start, max_lr, t / peak_at) if t <= peak_at
                   else cos(max_lr, low, (t - peak_at) / (end_at - peak_at)))
    return out


def healthy(seed: int = 0) -> Run:
    rng = random.Random(seed)

    def noisy(x: float, rel: float = 0.01) -> float:
        return x * (1 + rel * rng.gauss(0, 1))

    decay = [math.exp(-s / 80) for s in range(STEPS)]
    evals = range(EVAL_EVERY - 1, STEPS, EVAL_EVERY)
    return {
        "loss": [(s, noisy(2.2 * d + 0.3)) for s, d in enumerate(decay)],
        "lr": [(s, lr) for s, lr in zip(range(0, STEPS, LR_EVERY), onecycle(False))],
        "grad_norm": [(s, noisy(0.6 + 1.2 * d, 0.05)) for s, d in enumerate(decay)],
        "train_acc": [(s, min(0.99, noisy(0.95 - 0.85 * d))) for s, d in enumerate(decay)],
        "expert_gini": [(s, noisy(0.33 + 0.05 * (1 - d), 0.02)) for s, d in enumerate(decay)],
        "expert_entropy": [(s, noisy(1.9, 0.005)) for s in range(STEPS)],
        "metric.train_mae": [(s, noisy(6.0 * d + 1.0)) for s, d in enumerate(decay)],
        "metric.train_collapse_level": [(s, noisy(0.15 + 0.3 * d, 0.05)) for s, d in enumerate(decay)],
        "val_loss": [(s, noisy(2.2 * decay[s] + 0.35)) for s in evals],
        "val_acc": [(s, min(0.99, noisy(0.93 - 0.83 * decay[s]))) for s in evals],
        "val_f1": [(s, noisy(0.7 - 0.5 * decay[s])) for s in evals],
    }


def _set(run: Run, signal: str, f: Callable[[int, float], float], start: int = 0) -> Run:
    run[signal] = [(s, f(s, v) if s >= start else v) for s, v in run[signal]]
    return run


def _nonfinite(run: Run) -> Run:
    _set(run, "loss", lambda s, v: math.nan, 200)
    return _set(run, "grad_norm", lambda s, v: math.nan, 200)


def _divergence(run: Run) -> Run:
    return _set(run, "loss", lambda s, v: v * math.exp((s - 150) / 12), 150)


def _loss_spike(run: Run) -> Run:
    return _set(run, "loss", lambda s, v: v * 8 if s == 150 else v, 150)


def _stalled(run: Run) -> Run:
    rng = random.Random(1)
    return _set(run, "loss", lambda s, v: 2.3 * (1 + 0.002 * rng.gauss(0, 1)))


def _exploding(run: Run) -> Run:
    return _set(run, "grad_norm", lambda s, v: v * 4e4)


def _nan_hidden(run: Run) -> Run:
    return _set(run, "grad_norm", lambda s, v: math.nan if 150 <= s < 160 else v)


def _metric_divergence(run: Run) -> Run:
    return _set(run, "metric.train_mae", lambda s, v: v * math.exp((s - 120) / 15), 120)


def _out_of_range(run: Run) -> Run:
    return _set(run, "expert_gini", lambda s, v: 0.3 - 0.004 * (s - 150), 150)


def _train_val(run: Run) -> Run:
    return _set(run, "val_loss", lambda s, v: 0.55 + 0.004 * (s - 100), 100)


def _val_at_chance(run: Run) -> Run:
    return _set(run, "val_acc", lambda s, v: 0.1)  # 10 classes


def _degenerate(run: Run) -> Run:
    return _set(run, "val_f1", lambda s, v: 0.0, 200)


def _scheduler(run: Run) -> Run:
    run["lr"] = [(s, lr) for s, lr in zip(range(0, STEPS, LR_EVERY), onecycle(True))]
    return run


def _collapse(run: Run) -> Run:
    _set(run, "expert_gini", lambda s, v: min(0.8, v + 0.005 * (s - 100)), 100)
    return _set(run, "expert_entropy", lambda s, v: max(0.4, v - 0.01 * (s - 100)), 100)


def _representation_collapse(run: Run) -> Run:
    return _set(run, "metric.train_collapse_level", lambda s, v: min(0.95, v + 0.01 * (s - 100)), 100)


def _zero_loss(run: Run) -> Run:
    """A cross-entropy over one class: the loss is exactly 0 from the first step."""
    return _set(run, "loss", lambda s, v: 0.0)


# id -> (the healthy run with its failure planted, extra `traindoc logs` options)
PLANTED: dict[str, tuple[Callable[[Run], Run], tuple[str, ...]]] = {
    "nonfinite": (_nonfinite, ()),
    "divergence": (_divergence, ()),
    "loss-spike": (_loss_spike, ()),
    "stalled-loss": (_stalled, ()),
    "exploding-gradients": (_exploding, ()),
    # The same healthy log: every logged pre-clip norm is 5x a max_norm of 0.1 or more; with
    # max_norm 1 only the first steps' norms are above it.
    "clipping-every-step": (lambda run: run, ("--max-norm", "0.1")),
    "nan-hidden-by-logging": (_nan_hidden, ()),
    "metric-divergence": (_metric_divergence, ()),
    "metric-out-of-range": (_out_of_range, ()),
    "train-val-divergence": (_train_val, ()),
    "val-at-chance": (_val_at_chance, ()),
    "degenerate-threshold": (_degenerate, ()),
    "scheduler-before-optimizer": (_scheduler, ()),
    "expert-collapse": (_collapse, ()),
    "representation-collapse": (_representation_collapse, ()),
    "constant-loss": (_zero_loss, ()),
}
HEALTHY_OPTIONS: tuple[str, ...] = ("--max-norm", "1")
