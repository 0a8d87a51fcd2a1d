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

from traindoc import events as ev
from traindoc.events import Event


MAX_STEP = 2**63 - 1  # steps are int64 in every logger (TensorBoard's Event.step)


class Series:
    """One column's points in file order: parallel lists of steps and values.

    ``ordered`` is a reader's promise, made after checking the steps in bulk (numpy), that they
    are non-decreasing and within 0..2**63-1, so ``Table.finish`` has nothing to redo; whoever
    changes ``steps`` afterwards (appending another file's points) sets it back to False."""

    __slots__ = ("ordered", "steps", "values")

    def __init__(self, steps: list[int] | None = None, values: list[float] | None = None,
                 ordered: bool = False) -> None:
        self.steps: list[int] = steps if steps is not None else []
        self.values: list[float] = values if values is not None else []
        self.ordered = ordered

    def __len__(self) -> int:
        return len(self.steps)

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
    return [ev.Series(signal_of[name], s.steps, s.values)
            for name, s in table.series.items() if name in signal_of]


def one_line(text: str) -> str:
    """``text`` with control characters (a newline in a column name) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def to_float(text: str) -> float | None:
    """A cell as a number: None for empty or non-numeric text; nan/inf kept."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def is_int(x: float) -> bool:
    return math.isfinite(x) and x == int(x)
