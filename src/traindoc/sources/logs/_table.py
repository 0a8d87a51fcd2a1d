"""What every log reader produces: named series of (step, value), before any mapping.

A reader fills a ``Table``; ``series`` turns a mapped table into ``Series`` events. Steps are
0-based ints on the log's x axis (optimizer steps, or epochs when the log has no step).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from itertools import islice
from operator import le
from typing import TYPE_CHECKING, Sequence, cast

from traindoc import events as ev
from traindoc.events import Event
from traindoc.report import safe

if TYPE_CHECKING:
    import numpy as np


MAX_STEP = 2**63 - 1  # steps are int64 in every logger (TensorBoard's Event.step)


class Series:
    """One column's points in file order: parallel lists of steps and values.

    ``ordered`` is a reader's promise, made after checking the steps in bulk (numpy), that they
    are non-decreasing and within 0..2**63-1, so ``Table.finish`` has nothing to redo; whoever
    changes ``steps`` afterwards (appending another file's points) sets it back to False.

    A bulk reader hands numpy arrays (``arrays``: steps int64, values float64): they reach the
    detectors as they are (``columns``), and become lists only if something reads ``steps`` or
    ``values`` (a merge, a resumed run): ``tolist`` of a million-row log's columns costs
    ~0.1 s, and the vectorized detectors would only turn the lists back into arrays."""

    __slots__ = ("_arrays", "_steps", "_values", "ordered")

    def __init__(self, steps: list[int] | None = None, values: list[float] | None = None,
                 ordered: bool = False, arrays: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self._arrays = arrays
        self._steps: list[int] | None = steps if steps is not None else None if arrays is not None else []
        self._values: list[float] | None = values if values is not None else None if arrays is not None else []
        self.ordered = ordered

    def _lists(self) -> tuple[list[int], list[float]]:
        if self._steps is None or self._values is None:
            assert self._arrays is not None  # one of the two is always set
            self._steps, self._values = self._arrays[0].tolist(), self._arrays[1].tolist()
            self._arrays = None  # the lists may change from here on
        return self._steps, self._values

    @property
    def steps(self) -> list[int]:
        return self._lists()[0]

    @steps.setter
    def steps(self, steps: list[int]) -> None:
        self._steps, self._values = steps, self._lists()[1]

    @property
    def values(self) -> list[float]:
        return self._lists()[1]

    @values.setter
    def values(self, values: list[float]) -> None:
        self._steps, self._values = self._lists()[0], values

    def columns(self) -> tuple[Sequence[int], Sequence[float]]:
        """The steps and values as they are: numpy arrays from a bulk reader, else lists (the
        engine and the detectors take either; events.columns turns arrays into Python numbers
        where points are replayed)."""
        if self._arrays is not None:
            return cast("Sequence[int]", self._arrays[0]), cast("Sequence[float]", self._arrays[1])
        return self._lists()

    def finite_max(self) -> float | None:
        """The largest finite value; None when there is none."""
        if self._arrays is not None:
            import numpy as np

            finite = self._arrays[1][np.isfinite(self._arrays[1])]
            return float(finite.max()) if len(finite) else None
        finite = [v for v in self.values if math.isfinite(v)]
        return max(finite) if finite else None

    def __len__(self) -> int:
        return len(self._arrays[0]) if self._arrays is not None else len(self.steps)

    def resumed_at(self) -> list[tuple[int, int]]:
        """Make the steps non-decreasing the way TensorBoard does for a resumed run: when the
        step goes back (a run restarted from a checkpoint and logged those steps again), the
        newer points replace the older ones from that step on. Returns (from, to) for each
        restart, empty for the common case (one C-speed pass)."""
        steps = self.steps
        if all(map(le, steps, islice(steps, 1, None))):
            return []
        restarts: list[tuple[int, int]] = []
        out_s: list[int] = []
        out_v: list[float] = []
        for s, v in zip(steps, self.values):
            if out_s and s < out_s[-1]:
                restarts.append((out_s[-1], s))
                cut = bisect.bisect_left(out_s, s)
                del out_s[cut:], out_v[cut:]
            out_s.append(s)
            out_v.append(v)
        self.steps, self.values = out_s, out_v
        return restarts


@dataclass
class Table:
    """A log read from one or more files of one run."""

    format: str  # "csv", "lightning-csv", "tensorboard", "trainer_state", "jsonl"
    files: list[str]
    x: str = "step"  # "step" or "epoch"
    x_column: str | None = None
    series: dict[str, Series] = field(default_factory=dict)
    non_numeric: list[str] = field(default_factory=list)  # columns with text, not numbers
    notes: list[str] = field(default_factory=list)
    events: list[Event] | None = None  # a traindoc --record stream carries events already

    def finish(self) -> None:
        """Order every series by step (resumed runs), drop points whose step is not a step
        (negative, or beyond int64 as no logger writes) and empty series; note what changed."""
        # The columns of a CSV share one steps list: it is checked once, not per column (min,
        # max and the order check cost 20-40 ms each on a million steps). Keyed by id, holding
        # the list so that its id cannot be reused while the table is finished.
        verdicts: dict[int, tuple[list[int], bool, bool]] = {}  # id -> (steps, in range, in order)
        for name, s in list(self.series.items()):
            if s.ordered and len(s):
                continue
            if id(s.steps) not in verdicts:
                steps = s.steps
                in_range = not steps or (min(steps) >= 0 and max(steps) <= MAX_STEP)
                verdicts[id(steps)] = (steps, in_range,
                                       in_range and all(map(le, steps, islice(steps, 1, None))))
            _, in_range, in_order = verdicts[id(s.steps)]
            if in_order and len(s):
                continue
            if not in_range:
                keep = [i for i, x in enumerate(s.steps) if 0 <= x <= MAX_STEP]
                self.notes.append(f"{name}: {len(s) - len(keep)} point(s) with a {self.x} below 0 or "
                                  "beyond 2**63 are skipped")
                s.steps, s.values = [s.steps[i] for i in keep], [s.values[i] for i in keep]
            if not len(s):
                del self.series[name]
                continue
            restarts = s.resumed_at()
            if restarts:
                a, b = restarts[0]
                more = f" ({len(restarts)} restarts)" if len(restarts) > 1 else ""
                self.notes.append(
                    f"{name}: the {self.x} went back from {a} to {b}{more} (a resumed run?); the "
                    "later values replace the earlier ones")


def series(table: Table, signal_of: dict[str, str]) -> list[ev.Series]:
    """The mapped columns as ``Series`` events, in file order."""
    return [ev.Series(signal_of[name], *s.columns()) for name, s in table.series.items() if name in signal_of]


def one_line(text: str) -> str:
    """``text`` with control characters (a newline in a column name) escaped."""
    return safe.terminal(text)


def number(value: object) -> float | None:
    """A JSON value as a number: None for booleans, non-numeric text and anything else; an int
    beyond float range is infinite; quoted "NaN" (a few writers quote it) is NaN."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        try:
            return float(value)
        except (ValueError, OverflowError):
            return None
    return None


def to_float(text: str) -> float | None:
    """A cell as a number: None for empty or non-numeric text; nan/inf kept."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None

