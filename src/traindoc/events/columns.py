"""Log columns replayed as points: the ``Scalar`` events a ``Series`` stands for, in step order,
for the detectors that judge point by point (and for the replays that compare the two)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Sequence, TypeVar

from traindoc.events.steps import Scalar, Series

T = TypeVar("T")


def scalars(columns: Sequence[Series]) -> Iterator[Scalar]:
    """The columns' points as Scalars in step order (columns in the given order within a step)."""
    if not columns:
        return
    # Plain Python numbers (a reader may hand numpy arrays): findings carry them into JSON.
    columns = [c if isinstance(c.steps, list) and isinstance(c.values, list)
               else Series(c.name, plain(c.steps), plain(c.values)) for c in columns]
    make = _make
    first = columns[0].steps
    if all(c.steps is first or c.steps == first for c in columns):  # lists, from here on
        # Dense (one row per step, every column filled): walk the rows.
        names = [c.name for c in columns]
        for step, row in zip(first, zip(*(c.values for c in columns))):
            for name, v in zip(names, row):
                yield make(step, name, v)
        return
    # Sparse (columns on different rows or steps): merge the sorted columns by step.
    all_steps = sorted(set().union(*(c.steps for c in columns)))
    pos = [0] * len(columns)
    for step in all_steps:
        for j, c in enumerate(columns):
            p, steps, end = pos[j], c.steps, len(c)
            while p < end and steps[p] == step:
                yield make(step, c.name, c.values[p])
                p += 1
            pos[j] = p


def plain(seq: Sequence[T]) -> list[T]:
    """``seq`` as a list; a numpy array's numbers become Python's (``tolist``)."""
    tolist: Callable[[], list[T]] | None = getattr(seq, "tolist", None)
    return tolist() if tolist is not None else list(seq)


def _fast_scalar() -> Callable[[int, str, float], Scalar] | None:
    """Scalar(step, name, value) without the frozen dataclass's __init__ (three
    object.__setattr__ calls): 3x faster, which matters for millions of log points. Used only
    while Scalar is a plain frozen dataclass with a __dict__; checked against the real
    constructor."""
    new = object.__new__

    def make(step: int, name: str, value: float) -> Scalar:
        s = new(Scalar)
        d = s.__dict__
        d["step"] = step
        d["name"] = name
        d["value"] = value
        return s

    if [f.name for f in dataclasses.fields(Scalar)] != ["step", "name", "value"]:
        return None
    try:
        same = make(1, "loss", 0.5) == Scalar(1, "loss", 0.5)
    except (AttributeError, TypeError):  # slots: no __dict__
        return None
    return make if same else None


_make = _fast_scalar() or Scalar
