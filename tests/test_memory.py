"""Per-step state is bounded: a run ten times longer holds about the same memory.

The live-like mix of benchmarks/memory.py (per step: loss, grad_norm and lr, a backward(), a
clip, the step's lifecycle; on sampled steps: 10 parameters, the accumulation record, the
DataLoader waits, activations) goes through the engine with every detector. What the engine and
its detectors hold (tracemalloc: the allocations made during the run and still alive) is read
after 2,000 steps and after 20,000: a detector that keeps one entry per step, per sampled step
or per event makes the second reading several times the first. The full-size numbers (1,000 and
200,000 or 1,000,000 steps) come from ``python benchmarks/memory.py``.
"""

from __future__ import annotations

import importlib.util
import tracemalloc
from types import ModuleType

from conftest import ROOT
from traindoc.detectors import build
from traindoc.engine import Engine

SHORT, LONG = 2_000, 20_000


def _benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("memory_benchmark", ROOT / "benchmarks" / "memory.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_held_memory_does_not_grow_with_steps() -> None:
    bench = _benchmark()
    warm = Engine(build())  # lazy imports (numpy for the column detectors) before tracing
    for event in bench.stream(300):
        warm.feed(event)
    warm.finish()

    detectors = build()
    engine = Engine(detectors)
    held: dict[int, int] = {}
    sizes: dict[int, dict[str, int]] = {}
    tracemalloc.start()
    try:
        for event in bench.stream(LONG):
            engine.feed(event)
            if getattr(event, "signal", "") == "lifecycle" and event.step + 1 in (SHORT, LONG):
                # The end of a step (StepEnd): the engine, the detectors and their findings.
                held[event.step + 1] = tracemalloc.get_traced_memory()[0]
                sizes[event.step + 1] = {d.id: bench.deep_size(d) for d in detectors}
    finally:
        tracemalloc.stop()
    assert set(held) == {SHORT, LONG}
    grew = sorted(((sizes[LONG][i] - sizes[SHORT][i], i) for i in sizes[LONG]), reverse=True)
    top = ", ".join(f"{i} {a / 1024:+.0f} KiB" for a, i in grew[:5])
    assert held[LONG] < 2 * held[SHORT], (
        f"{LONG:,} steps hold {held[LONG] / 1024:.0f} KiB, {SHORT:,} steps {held[SHORT] / 1024:.0f} KiB: "
        f"per-step state grows; the detectors that grew most: {top}")
