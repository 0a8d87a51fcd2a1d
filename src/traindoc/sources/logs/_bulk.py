"""numpy helpers the readers' fast paths share (_csv_fast, _tb_fast)."""

from __future__ import annotations

import numpy as np

# Bytes scanned at a time: a 30 MB boolean temporary would be mapped and faulted in afresh on
# every scan; blocks this size stay in malloc's heap and are reused.
BLOCK = 1 << 22


def find_byte(buf: np.ndarray, start: int, end: int, byte: int) -> np.ndarray:
    """Offsets of ``byte`` in buf[start:end], in order (int64)."""
    parts = [np.flatnonzero(buf[a:min(a + BLOCK, end)] == byte) + a for a in range(start, end, BLOCK)]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def unaligned(data: bytes, dtype: str) -> np.ndarray:
    """``view[i]``: the number of type ``dtype`` stored at byte ``i`` of ``data`` (a view, no copy;
    one gather reads a whole word at any offset)."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((max(0, len(data) - size + 1),), dtype, data, 0, (1,))


def in_order(steps: np.ndarray) -> bool:
    """Whether ``steps`` are what ``Series.ordered`` promises: non-decreasing, none negative."""
    return bool(len(steps) and steps.min() >= 0 and (steps[1:] >= steps[:-1]).all())
