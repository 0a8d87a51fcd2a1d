"""repeated-batch: the loop trains on the same batch again and again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

from traindoc.detectors._common import Example, finding
from traindoc.detectors._maths import Head
from traindoc.events import Batch, Event
from traindoc.findings import Finding


_WINDOW = 4096  # fingerprints remembered per iterator


class RepeatedBatch:
    """Two patterns, both measured on DataLoader batches (full-batch training without a loader
    never fires): a fresh iterator per step that is abandoned after its first batch and yields
    the same data each time (``next(iter(loader))``), or an identical batch twice within one
    pass over the data (workers seeded alike), among its last 4,096 batches."""

    id: ClassVar[str] = "repeated-batch"
    needs: ClassVar[frozenset[str]] = frozenset({"batch"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("zoo/repeated_batch.py", 0),
        Example("zoo/healthy_mlp.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        repeats: int = 3

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._prev: Batch | None = None
        self._abandoned: Head[int] = Head(20)  # steps of each pattern: how many, the first 20
        self._within: Head[int] = Head(20)
        # Fingerprints per iterator (the last 4), each the latest _WINDOW of its pass: workers
        # seeded alike repeat within a few batches, and an endless iterator stays bounded.
        self._seen: dict[int, dict[str, None]] = {}
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, Batch)
        prev, self._prev = self._prev, event
        if (prev is not None and event.index == 0 and prev.index == 0 and event.iterator != prev.iterator
                and event.fingerprint == prev.fingerprint and event.loader_len > 1):
            self._abandoned.append(event.step)
        seen = self._seen.setdefault(event.iterator, {})
        if event.fingerprint in seen:
            self._within.append(event.step)
            del seen[event.fingerprint]  # re-added as the latest
        seen[event.fingerprint] = None
        if len(seen) > _WINDOW:
            del seen[next(iter(seen))]
        if len(self._seen) > 4:
            self._seen.pop(min(self._seen))
        if not self._fired and (len(self._abandoned) >= self.config.repeats or len(self._within) >= self.config.repeats):
            self._fired = True
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._fired:
            yield self._finding()

    def _finding(self) -> Finding:
        if len(self._abandoned) >= len(self._within):
            found, how = self._abandoned, (
                "each step made a new DataLoader iterator, took its first batch and dropped it; "
                "that batch was identical every time")
            cause = ("`next(iter(loader))` inside the loop restarts the loader each step; with "
                     "shuffle=False it always returns the first batch.")
            fix = ("Create the iterator once per epoch (`for x, y in loader:`), or keep one "
                   "`it = iter(loader)` and call `next(it)`, re-creating it on StopIteration.")
        else:
            found, how = self._within, "the same batch came back within one pass over the data"
            cause = ("DataLoader workers produce identical 'random' data: each worker inherits the "
                     "same NumPy/random seed, so random augmentation or sampling repeats.")
            fix = ("Seed per worker with `worker_init_fn` (np.random.seed(torch.initial_seed() % 2**32)) "
                   "or use torch's RNG in the dataset.")
        steps = found.items
        return finding(
            self.id, step=steps[0] - 1 if steps[0] > 0 else 0,
            message=f"{how}: {found.count} steps repeated an earlier batch (first at step {steps[0]}).",
            cause=cause, fix=fix,
            evidence={"repeated_steps": found.count, "first_steps": list(steps)},
        )
