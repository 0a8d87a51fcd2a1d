"""Vectorized helpers for the detectors' ``observe_series`` (columns judged at once: a log's
whole, or the engine's small columns of live Scalars).

Detectors import this module lazily, inside ``observe_series``: it imports numpy, which the
live face and ``traindoc lint`` must not pay for at start-up. Every helper reproduces what
the plain-Python maths (``_maths``) computes, bit for bit unless its docstring says otherwise.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import numpy as np
from numpy.lib.stride_tricks import as_strided

T = TypeVar("T")

# ---- columns as arrays ---------------------------------------------------------------------------
# The engine hands the same column objects to every vectorized detector of a delivery, and
# converting a million-element list costs ~25 ms: keep the last few conversions. Keyed by the
# object's identity (the cache holds the object, so its id cannot be reused meanwhile) and
# checked against its length; a column is not changed after it was delivered.
_CACHE: dict[tuple[int, str], tuple[object, np.ndarray]] = {}
_CACHE_SIZE = 8


def _array(seq: Sequence[float], dtype: type, kind: str) -> np.ndarray:
    if isinstance(seq, np.ndarray) and seq.dtype == dtype:
        return seq
    key = (id(seq), kind)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is seq and len(hit[1]) == len(seq):
        return hit[1]
    arr: np.ndarray = np.asarray(seq, dtype=dtype)
    arr.flags.writeable = False  # shared between detectors
    _CACHE[key] = (seq, arr)
    while len(_CACHE) > _CACHE_SIZE:  # the oldest goes
        _CACHE.pop(next(iter(_CACHE)), None)
    return arr


def floats(seq: Sequence[float]) -> np.ndarray:
    """A column's values as a read-only float64 array (shared: do not modify)."""
    return _array(seq, np.float64, "f")


def ints(seq: Sequence[int]) -> np.ndarray:
    """A column's steps as a read-only int64 array (shared: do not modify)."""
    return _array(seq, np.int64, "i")


def item(seq: Sequence[T], i: int | np.integer) -> T:
    """``seq[i]`` as a plain Python number (a value or a step): a column may be a numpy array,
    and what the detectors keep ends up in findings (JSON)."""
    v = seq[int(i)]
    return v.item() if isinstance(v, np.generic) else v


def items(seq: Sequence[T], idx: np.ndarray | slice) -> list[T]:
    """``seq[idx]`` (indices or a slice) as a list of plain Python numbers."""
    if isinstance(seq, np.ndarray):
        return seq[idx].tolist()
    if isinstance(idx, slice):
        return list(seq[idx])
    return [seq[i] for i in idx.tolist()]


# ---- small searches ------------------------------------------------------------------------------
def first_true(mask: np.ndarray, start: int = 0) -> int | None:
    """The first index >= ``start`` where ``mask`` is True, None when there is none."""
    if start >= len(mask):
        return None
    i = start + int(np.argmax(mask[start:]))
    return i if mask[i] else None


def run_lengths(mask: np.ndarray) -> np.ndarray:
    """For each index, how many consecutive True values end there (0 where False)."""
    idx = np.arange(len(mask))
    last_false = np.maximum.accumulate(np.where(mask, -1, idx))
    return idx - last_false


def first_of_step(steps: np.ndarray) -> np.ndarray:
    """True at the first point of each step (steps non-decreasing)."""
    keep = np.ones(len(steps), dtype=bool)
    keep[1:] = steps[1:] != steps[:-1]
    return keep


# ---- robust statistics ---------------------------------------------------------------------------
class RollingMedian:
    """The medians of the windows ``x[k:k+n]`` (k < ``len(self)`` = len(x) - n + 1) of finite
    values, exactly as ``_maths.median`` computes them (sorted; the middle value, or
    ``0.5 * (a + b)`` of the two middle ones for an even n), computed only where asked: a
    million windows cost ~50-90 ms, and most questions are settled by the windows' minimum
    (``lo``) and maximum (``hi``), which bound their medians and cost a few ms."""

    def __init__(self, x: np.ndarray, n: int) -> None:
        self.n = n
        # sliding_window_view(x, n), read-only, without its 20 us of checks (live columns are short)
        x = self.x = np.ascontiguousarray(x, dtype=np.float64)
        m, step = max(0, len(x) - n + 1), x.strides[0]
        self.windows = as_strided(x, shape=(m, n), strides=(step, step), writeable=False)
        self._lo: np.ndarray | None = None
        self._hi: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.windows)

    def at(self, ks: np.ndarray | slice | list[int]) -> np.ndarray:
        """The medians of the windows ``ks`` (indices or a slice)."""
        windows = self.windows[ks]
        n, out = self.n, np.empty(len(windows))
        chunk = max(1, (1 << 19) // n)  # sorting small copies is faster than one big one
        for s in range(0, len(windows), chunk):
            part = np.sort(windows[s:s + chunk], axis=1)
            mid = part[:, n // 2]
            out[s:s + chunk] = mid if n % 2 else 0.5 * (part[:, n // 2 - 1] + mid)
        return out

    @property
    def lo(self) -> np.ndarray:
        """Each window's minimum: <= its median."""
        if self._lo is None:
            self._lo = self._widen(_rolling(np.minimum, self.x, self.n), -1.0)
        return self._lo

    @property
    def hi(self) -> np.ndarray:
        """Each window's maximum: >= its median."""
        if self._hi is None:
            self._hi = self._widen(_rolling(np.maximum, self.x, self.n), 1.0)
        return self._hi

    def _widen(self, bound: np.ndarray, sign: float) -> np.ndarray:
        """An even window's median 0.5 * (a + b) overflows to +-inf beyond a bound of half the
        largest float: there the bound is +-inf, so that it still bounds the median."""
        if self.n % 2:
            return bound
        return np.where(sign * bound > np.finfo(np.float64).max / 2, sign * np.inf, bound)

    def extreme(self, lowest: bool) -> tuple[float, int]:
        """The lowest (or highest) median and the first window that has it. Only the windows
        whose bound can reach the median of the most promising window are computed."""
        if lowest:
            ref = self.at([int(np.argmin(self.hi))])[0]
            ks = np.flatnonzero(self.lo <= ref)
        else:
            ref = self.at([int(np.argmax(self.lo))])[0]
            ks = np.flatnonzero(self.hi >= ref)
        meds = self.at(ks)
        j = int(np.argmin(meds) if lowest else np.argmax(meds))
        return float(meds[j]), int(ks[j])

    def first(self, ks: np.ndarray, test: Callable[[np.ndarray], np.ndarray]) -> int | None:
        """The first window of ``ks`` (ascending) whose median passes ``test`` (vectorized),
        None when none does; medians computed in growing chunks, so an early hit is cheap."""
        s, size = 0, 256
        while s < len(ks):
            hit = first_true(test(self.at(ks[s:s + size])))
            if hit is not None:
                return int(ks[s + hit])
            s, size = s + size, 4 * size
        return None


def _rolling(op: np.ufunc, x: np.ndarray, n: int) -> np.ndarray:
    """``op`` (np.minimum, np.maximum) over each window ``x[k:k+n]``, by doubling: log2(n)
    passes."""
    m, width = max(0, len(x) - n + 1), 1
    while 2 * width <= n:  # x[k] = op over x[k:k+2w] of the original
        x, width = op(x[:-width], x[width:]), 2 * width
    return op(x[:m], x[n - width:n - width + m])
