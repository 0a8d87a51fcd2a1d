"""Per-step state is bounded: a run ten times longer holds about the same memory.

The live-like mix of benchmarks/memory.py (per step: loss, grad_norm and lr, a backward(), a
clip, the step's lifecycle; on sampled steps: 10 parameters, the accumulation record, the
DataLoader waits, activations) goes through the engine with every detector, and what the engine
holds (its buffers, the detectors, the findings: everything reachable from it, measured by the
benchmark's ``deep_size``) is read after 2,000 steps and after 20,000. A detector that keeps one
entry per step, per sampled step or per event makes the second reading much larger than the
first. (tracemalloc sees the same, but slows these 20,000 steps to 10 s; ``python
benchmarks/memory.py`` reports it, for 1,000 and 200,000 steps.)
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

from conftest import ROOT
from traindoc.detectors import build
from traindoc.engine import Engine

SHORT, LONG = 2_000, 20_000
GROWTH = 1.5  # what bounded samples may still add while they fill up (about 1.1x today)


def _benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("memory_benchmark", ROOT / "benchmarks" / "memory.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_held_memory_does_not_grow_with_steps() -> None:
    bench = _benchmark()
    detectors = build()
    engine = Engine(detectors)
    held: dict[int, int] = {}
    sizes: dict[int, dict[str, int]] = {}
    for event in bench.stream(LONG):
        engine.feed(event)
        if getattr(event, "signal", "") == "lifecycle" and event.step + 1 in (SHORT, LONG):  # a StepEnd
            held[event.step + 1] = bench.deep_size(engine)
            sizes[event.step + 1] = {d.id: bench.deep_size(d) for d in detectors}
    assert set(held) == {SHORT, LONG}
    grew = sorted(((sizes[LONG][i] - sizes[SHORT][i], i) for i in sizes[LONG]), reverse=True)
    top = ", ".join(f"{i} {b / 1024:+.0f} KiB" for b, i in grew[:5])
    assert held[LONG] < GROWTH * held[SHORT], (
        f"the engine holds {held[LONG] / 1024:.0f} KiB after {LONG:,} steps, {held[SHORT] / 1024:.0f} KiB "
        f"after {SHORT:,}: per-step state grows; the detectors that grew most: {top}")


def test_thinned_append_keeps_what_extend_keeps() -> None:
    """Detectors fed one value per event append; a column detector extends by chunks: both must
    keep the same values, at most ``cap`` of them, evenly spread."""
    from traindoc.detectors._maths import Head, Thinned

    xs = [float(i) for i in range(5000)]
    for cap in (2, 3, 100, 1024):
        one, chunks = Thinned(cap), Thinned(cap)
        for x in xs:
            one.append(x)
        for i in range(0, len(xs), 37):
            chunks.extend(xs[i:i + 37])
        assert (one.values, one.stride, one.count) == (chunks.values, chunks.stride, chunks.count)
        assert len(one.values) <= cap and one.values[0] == 0.0
    head: Head[int] = Head(3)
    for i in range(10):
        head.append(i)
    assert (head.items, head.count, len(head)) == ([0, 1, 2], 10, 10)
