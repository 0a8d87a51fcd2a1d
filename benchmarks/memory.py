"""How much memory do the engine and the detectors hold as a run gets longer?

    python benchmarks/memory.py                  # 1,000 and 1,000,000 steps
    python benchmarks/memory.py --steps 1000 100000

Feeds a synthetic live-like stream (per step: the Scalars loss, grad_norm and lr; a healthy
decaying loss with noise, a warmup-then-decay LR) through ``traindoc.engine.Engine`` with every
detector of ``traindoc.detectors.build()``, and prints the tracemalloc peak of the whole run
(engine, detectors, the events in flight) and what the detectors still hold at the end, with
the detectors that hold the most. Per-step state must be bounded: the numbers for 1,000,000
steps should be those for 1,000 plus a constant.
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
from traindoc.events import Event, RunEnd, RunStart, Scalar  # noqa: E402


def stream(steps: int) -> Iterator[Event]:
    rng = random.Random(0)
    # No declared signals (as live): every detector that reads loss, grad_norm or lr gets them.
    yield RunStart(source="live")
    for s in range(steps):
        yield Scalar(s, "loss", 2.5 * math.exp(-s / (steps / 4)) + 0.2 + 0.05 * rng.random())
        yield Scalar(s, "grad_norm", 1.0 + 0.3 * rng.random())
        yield Scalar(s, "lr", 3e-4 * min(1.0, (s + 1) / 2000) * (0.55 + 0.45 * math.cos(math.pi * s / steps)))
    yield RunEnd(steps=steps)


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


def measure(steps: int) -> tuple[float, float, float, list[tuple[int, str]]]:
    """(peak MiB, held at the end MiB, seconds, [(bytes, id)] of the detectors)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    detectors = build()
    engine = Engine(detectors)
    for event in stream(steps):
        engine.feed(event)
    engine.finish()
    seconds = time.perf_counter() - t0
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    sizes = sorted(((deep_size(d), d.id) for d in detectors), reverse=True)
    return peak / 2**20, held / 2**20, seconds, sizes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, nargs="+", default=[1_000, 1_000_000])
    args = ap.parse_args()
    import numpy  # noqa: F401  (imported by the column detectors: not part of what they hold)

    print(f"python {sys.version.split()[0]}; per step: Scalars loss, grad_norm, lr; all "
          f"{len(build())} detectors")
    for steps in args.steps:
        peak, held, seconds, sizes = measure(steps)
        top = ", ".join(f"{i} {b / 1024:.1f} KiB" for b, i in sizes[:4])
        print(f"{steps:>9,} steps: tracemalloc peak {peak:7.2f} MiB, held at the end {held:7.2f} MiB "
              f"({seconds:.1f} s); detectors holding the most: {top}")


if __name__ == "__main__":
    main()
