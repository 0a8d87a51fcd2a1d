"""Pure maths shared by detectors: robust statistics over short series. No torch."""

from __future__ import annotations

import math
from typing import Any, Generic, Protocol, Sequence, TypeVar

T = TypeVar("T")


def finite(xs: Sequence[float]) -> list[float]:
    return [x for x in xs if math.isfinite(x)]


def median(xs: Sequence[float]) -> float:
    """Median of the finite values; NaN when there are none."""
    ys = sorted(finite(xs))
    if not ys:
        return math.nan
    mid = len(ys) // 2
    return ys[mid] if len(ys) % 2 else 0.5 * (ys[mid - 1] + ys[mid])


class Column(Protocol):
    """What ``Thinned`` reads: a list of floats or a numpy array of them."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: slice, /) -> Any: ...  # a list, or an array with .tolist()


class Thinned:
    """Every ``stride``-th value of a sequence (by position), the stride doubling whenever more
    than ``cap`` would be kept: at most ``cap`` values however long the run, spread evenly over
    it, and the same ones however the sequence is cut into calls. A bounded stand-in for the
    whole sequence (its median is the sequence's while it held at most ``cap`` values)."""

    def __init__(self, cap: int = 1024) -> None:
        self.cap, self.stride, self.count = cap, 1, 0
        self.values: list[float] = []

    def extend(self, xs: Column) -> None:
        self.count += len(xs)
        while -(-self.count // self.stride) > self.cap:  # positions 0, stride, ... below count
            self.values, self.stride = self.values[::2], 2 * self.stride
        part = xs[(len(xs) - self.count) % self.stride::self.stride]  # positions: multiples of stride
        tolist = getattr(part, "tolist", None)  # a numpy array: Python floats
        self.values.extend(tolist() if tolist is not None else part)

    def append(self, x: float) -> None:
        """``extend([x])``, without the slicing: for a detector fed one value per event."""
        self.count += 1
        while -(-self.count // self.stride) > self.cap:
            self.values, self.stride = self.values[::2], 2 * self.stride
        if (self.count - 1) % self.stride == 0:  # x sits at position count - 1
            self.values.append(x)


class Head(Generic[T]):
    """The first ``keep`` items of a sequence and how many there were: a bounded stand-in for a
    list of which a message quotes the length and the first few items (steps, events)."""

    def __init__(self, keep: int = 20) -> None:
        self.keep, self.count = keep, 0
        self.items: list[T] = []

    def append(self, x: T) -> None:
        self.count += 1
        if len(self.items) < self.keep:
            self.items.append(x)

    def __len__(self) -> int:
        return self.count


class Ema:
    """Exponential moving average with bias correction (so early values are not pulled to 0)."""

    def __init__(self, span: int) -> None:
        self.alpha = 2.0 / (span + 1.0)
        self._avg = 0.0
        self._weight = 0.0

    def update(self, x: float) -> float:
        self._avg = (1 - self.alpha) * self._avg + self.alpha * x
        self._weight = (1 - self.alpha) * self._weight + self.alpha
        return self.value

    @property
    def value(self) -> float:
        return self._avg / self._weight if self._weight else math.nan

    def state_dict(self) -> dict[str, float]:
        return {"avg": self._avg, "weight": self._weight}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self._avg, self._weight = state["avg"], state["weight"]


class Rollouts:
    """Whether each backward sums a varying number of a model's calls (the steps of an RL
    episode, a variable-length rollout): then the loss's size follows the rollout's length, and
    its ratio to its own past (a spike, a divergence) says nothing about the training. Fed the
    model calls before each sampled backward (``events.Forwards``): at least 4 different
    counts, the largest at least twice the smallest; a GAN's fixed 3 calls before D's backward
    and 1 before G's is not. ``since``: the step from which the loss is such a sum.

    Nor has a loss of one sample a scale (a TD update at each environment step, SGD on batches
    of one): ``one_row`` while the latest backward's calls each saw one row; its size is that
    sample's, a terminal transition's TD error many times the others'.

    Nor has a loss whose targets the model computes itself (``bootstrapped``, from the first
    backward whose ``Forwards`` says so: the model or a copy of it ran without gradients on the
    training batch's size in each step): a DQN's TD loss grows as its value estimates grow,
    and falls and rises again with each refresh of the target network, in a run that learns.
    ``judged``: none of these."""

    def __init__(self) -> None:
        self.counts: list[int] = []  # the first 4 different counts
        self.low = self.high = 0
        self.since: int | None = None
        self.one_row = False
        self.bootstrapped: int | None = None  # the step from which the targets are the model's

    @property
    def judged(self) -> bool:
        return self.since is None and not self.one_row and self.bootstrapped is None

    def see(self, step: int, calls: int, rows: int = 0, bootstrap: bool = False) -> None:
        self.one_row = rows == 1
        if bootstrap and self.bootstrapped is None:
            self.bootstrapped = step
        if self.since is not None or calls < 1:
            return
        if calls not in self.counts and len(self.counts) < 4:
            self.counts.append(calls)
        self.low, self.high = min(self.low or calls, calls), max(self.high, calls)
        if len(self.counts) >= 4 and self.high >= 2 * self.low:
            self.since = step

    def state_dict(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "low": self.low, "high": self.high, "since": self.since,
                "one_row": self.one_row, "bootstrapped": self.bootstrapped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts, self.low, self.high, self.since = list(state["counts"]), state["low"], state["high"], state["since"]
        self.one_row = bool(state.get("one_row", False))
        self.bootstrapped = state.get("bootstrapped")
