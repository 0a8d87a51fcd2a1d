"""How much memory do the engine and the detectors hold as a run gets longer?

    python benchmarks/memory.py                  # 1,000 and 200,000 steps (a few minutes)
    python benchmarks/memory.py --steps 1000 1000000   # over 10 minutes under tracemalloc
    python benchmarks/memory.py --scalars-only   # only the loss, grad_norm and lr Scalars

Feeds a synthetic live-like stream through ``traindoc.engine.Engine`` with every detector of
``traindoc.detectors.build()``. Per step: the Scalars loss, grad_norm and lr (a healthy
decaying loss with noise, a warmup-then-decay LR), a backward(), a clip_grad_norm_ call and the
step's lifecycle (StepBegin, StepEnd); on the steps a live run samples at the standard level
(the first 16, then every 25th, every 50th from step 1,000): ParamStats for 10 parameters of
a bf16 model (two fp32 norms), the accumulation record (GradAccumulation), the DataLoader waits
since the last sampled step (LoaderWait) and the activations of two ReLUs and the output. Prints the tracemalloc peak of
the whole run (engine, detectors, the events in flight) and what is still held at the end, with
the detectors that hold the most. Per-step state must be bounded: the numbers for 200,000 or
1,000,000 steps should be those for 1,000 plus a constant (tests/test_memory.py checks it on a
short run).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traindoc.detectors import build  # noqa: E402
from traindoc.engine import Engine  # noqa: E402
from traindoc.live.levels import LEVELS  # noqa: E402
from traindoc.events import (  # noqa: E402
    Activation, Backward, Clip, Event, GradAccumulation, LoaderWait, ParamStats, RunEnd, RunStart,
    Scalar, StepBegin, StepEnd,
)


# The parameters of the sampled steps: (name, dtype, numel).
PARAMS = [(f"h.{i // 2}.{'attn' if i % 2 == 0 else 'mlp'}.weight", "torch.bfloat16", 4096 * 1024)
          for i in range(8)] + [("ln_f.weight", "torch.float32", 1024), ("ln_f.bias", "torch.float32", 1024)]


def sampled(step: int) -> bool:
    """A live run's sampled steps at the standard level."""
    return LEVELS["standard"].sampled(step)


def stream(steps: int, mix: bool = True) -> Iterator[Event]:
    rng = random.Random(0)
    # No declared signals (as live): every detector that reads loss, grad_norm or lr gets them.
    yield RunStart(source="live")
    waited = 0  # steps since the last LoaderWait
    for s in range(steps):
        loss = 2.5 * math.exp(-s / (steps / 4)) + 0.2 + 0.05 * rng.random()
        norm = 1.0 + 0.3 * rng.random()
        lr = 3e-4 * min(1.0, (s + 1) / 2000) * (0.55 + 0.45 * math.cos(math.pi * s / steps))
        if mix:
            yield StepBegin(s)
        yield Scalar(s, "loss", loss)
        yield Scalar(s, "grad_norm", norm)
        yield Scalar(s, "lr", lr)
        if not mix:
            continue
        waited += 1
        yield Backward(s, loss, False, where="train.py:88")
        yield Clip(s, norm, 1.0, where="train.py:90")
        if sampled(s):
            for name, dtype, numel in PARAMS:
                low = dtype != "torch.float32"
                yield ParamStats(
                    s, name, dtype, numel, True, norm=30.0 + rng.random(), grad=0.3 * rng.random(),
                    has_grad=True, update=lr * (0.5 + rng.random()), unchanged=0.02 * rng.random(),
                    moved=lr * s, spacing=2 ** -8 * 0.02 if low else None, intended=lr, lr=lr)
            yield GradAccumulation(s, 0, "AdamW", lr, 1, 1, 1.0, (norm,), 0.0, True, params=len(PARAMS),
                                   backward_where="train.py:88", where="train.py:91", sites=1)
            yield LoaderWait(s, waited, 0.001 + 0.0002 * rng.random(), 0.1 + 0.01 * rng.random(),
                             loader="TokenDataset", batch_size=32, num_workers=4, pin_memory=True,
                             prefetch_factor=2, device="cuda")
            waited = 0
            for i in range(2):
                yield Activation(s, f"h.{i}.mlp.act", "ReLU", dead=0.01 * rng.random(), units=4096,
                                 batches=s + 1)
            yield Activation(s, "lm_head", "Linear", spread=1.0 + rng.random(), scale=1.5, lo=-8.0,
                             hi=8.0, is_output=True)
        yield StepEnd(s, 0, "stepped", taken=s + 1)
    yield RunEnd(steps=steps, optimizer_steps=steps if mix else None)


def deep_size(obj: object, seen: set[int] | None = None) -> int:
    """Bytes of ``obj`` and everything it holds (containers and instance attributes)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, type):
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
        size += sum(deep_size(x, seen) for x in obj)  # type: ignore[attr-defined]
    elif hasattr(obj, "__dict__"):
        size += deep_size(vars(obj), seen)
    return size


def measure(steps: int, mix: bool = True) -> tuple[float, float, float, list[tuple[int, str]]]:
    """(peak MiB, held at the end MiB, seconds, [(bytes, id)] of the detectors)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    detectors = build()
    engine = Engine(detectors)
    for event in stream(steps, mix):
        engine.feed(event)
    engine.finish()
    seconds = time.perf_counter() - t0
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    sizes = sorted(((deep_size(d), d.id) for d in detectors), reverse=True)
    return peak / 2**20, held / 2**20, seconds, sizes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, nargs="+", default=[1_000, 200_000])
    ap.add_argument("--scalars-only", action="store_true", help="per step only the Scalars loss, grad_norm, lr")
    args = ap.parse_args()
    measure(300, not args.scalars_only)  # lazy imports (numpy, _vector ...): not what detectors hold

    what = "Scalars loss, grad_norm, lr" if args.scalars_only else "Scalars loss, grad_norm, lr and the live mix"
    print(f"python {sys.version.split()[0]}; per step: {what}; all {len(build())} detectors")
    for steps in args.steps:
        peak, held, seconds, sizes = measure(steps, not args.scalars_only)
        top = ", ".join(f"{i} {b / 1024:.1f} KiB" for b, i in sizes[:4])
        print(f"{steps:>9,} steps: tracemalloc peak {peak:7.2f} MiB, held at the end {held:7.2f} MiB "
              f"({seconds:.1f} s); detectors holding the most: {top}")


if __name__ == "__main__":
    main()
