"""A sweep of runs for the fleet tests: healthy siblings with seed-to-seed noise, and one run
for each planted failure (the logs detectors that exist: divergence, NaN hidden by a logging
filter, stalled loss, exploding gradients, a spike, validation at chance, a thresholded metric
stuck at 0), plus the runs only their siblings can tell apart.

A run is ``{signal: [(step, value), ...]}``; the writers in each test module log it with the
real client of that format (torch's SummaryWriter, mlflow, wandb, plain CSV).
"""

from __future__ import annotations

import math
import random
from typing import Callable

Run = dict[str, list[tuple[int, float]]]

STEPS = 300
EVAL_EVERY = 20
HEALTHY_SEEDS = 8


def healthy(seed: int) -> Run:
    """A run that trains: each seed starts a little differently and learns a little faster or
    slower (+-8 %), with 1 % noise per logged point (5 % on the gradient norm)."""
    rng = random.Random(seed)
    rate = 80 * (1 + 0.08 * rng.uniform(-1, 1))
    start = 2.2 * (1 + 0.05 * rng.uniform(-1, 1))

    def noisy(x: float, rel: float = 0.01) -> float:
        return x * (1 + rel * rng.gauss(0, 1))

    decay = [math.exp(-s / rate) for s in range(STEPS)]
    evals = range(EVAL_EVERY - 1, STEPS, EVAL_EVERY)
    return {
        "loss": [(s, noisy(start * d + 0.3)) for s, d in enumerate(decay)],
        "lr": [(s, 3e-4) for s in range(0, STEPS, 10)],
        "grad_norm": [(s, noisy(0.6 + 1.2 * d, 0.05)) for s, d in enumerate(decay)],
        "val_loss": [(s, noisy(start * decay[s] + 0.35)) for s in evals],
        "val_acc": [(s, min(0.99, noisy(0.93 - 0.83 * decay[s]))) for s in evals],
        "val_f1": [(s, noisy(0.7 - 0.5 * decay[s])) for s in evals],
    }


def _set(run: Run, signal: str, f: Callable[[int, float], float], start: int = 0) -> Run:
    run[signal] = [(s, f(s, v) if s >= start else v) for s, v in run[signal]]
    return run


def _stalled(run: Run) -> Run:
    rng = random.Random(1)
    return _set(run, "loss", lambda s, v: 2.3 * (1 + 0.002 * rng.gauss(0, 1)))


def _slow(run: Run) -> Run:
    """Trains, but its loss stays 5x above every sibling's from step 60 on and falls steadily
    (nothing in the run alone is wrong: a checkpoint from another run, a broken shard)."""
    return _set(run, "loss", lambda s, v: 4.0 - 1.5 * s / STEPS)


def _tiny_grads(run: Run) -> Run:
    """Gradient norm 1000x below the siblings' from the start (a loss scaled by 1e-3)."""
    return _set(run, "grad_norm", lambda s, v: v * 1e-3)


# id -> the healthy run (seed 100 + its index) with the failure planted; the step where the
# detector must fire comes from the detector, the test checks the id.
PLANTED: dict[str, Callable[[Run], Run]] = {
    "divergence": lambda run: _set(run, "loss", lambda s, v: v * math.exp((s - 150) / 12), 150),
    "nan-hidden-by-logging": lambda run: _set(run, "grad_norm", lambda s, v: math.nan if 150 <= s < 160 else v),
    "stalled-loss": _stalled,
    "exploding-gradients": lambda run: _set(run, "grad_norm", lambda s, v: v * 4e4),
    "loss-spike": lambda run: _set(run, "loss", lambda s, v: v * 8 if s == 150 else v, 150),
    "val-at-chance": lambda run: _set(run, "val_acc", lambda s, v: 0.1),  # 10 classes
    "degenerate-threshold": lambda run: _set(run, "val_f1", lambda s, v: 0.0, 200),
}
# What else a planted run is diagnosed with: the logging filter hides the NaN from the loss,
# not from the gradient norm.
ALSO: dict[str, set[str]] = {"nan-hidden-by-logging": {"nonfinite"}}
# The runs only a comparison with their siblings catches: run name -> transform.
OUTLIERS: dict[str, Callable[[Run], Run]] = {"slow": _slow, "tiny-grads": _tiny_grads}


def sweep(planted: tuple[str, ...] = tuple(PLANTED), outliers: bool = True) -> dict[str, tuple[Run, set[str]]]:
    """{run name: (run, the failure ids it must be diagnosed with)}; healthy runs expect none."""
    out: dict[str, tuple[Run, set[str]]] = {}
    for seed in range(HEALTHY_SEEDS):
        out[f"healthy-{seed}"] = (healthy(seed), set())
    for i, id_ in enumerate(planted):
        out[id_] = (PLANTED[id_](healthy(100 + i)), {id_} | ALSO.get(id_, set()))
    if outliers:
        for i, (name, f) in enumerate(OUTLIERS.items()):
            out[name] = (f(healthy(200 + i)), {"sibling-outlier"})
    return out


def csv_text(run: Run) -> str:
    """The run as one CSV: a row per step, an empty cell where nothing was logged."""
    names = list(run)
    rows: dict[int, dict[str, float]] = {}
    for name, points in run.items():
        for s, v in points:
            rows.setdefault(s, {})[name] = v
    lines = ["step," + ",".join(names)]
    for s in sorted(rows):
        lines.append(f"{s}," + ",".join(repr(rows[s][n]) if n in rows[s] else "" for n in names))
    return "\n".join(lines) + "\n"
