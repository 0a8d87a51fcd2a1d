"""Named tensors read lazily, and the statistics computed on them in bounded memory.

A store hands out a tensor as a sequence of flat chunks (about ``CHUNK`` elements each), so a
multi-GB embedding never needs a full float32/float64 copy: safetensors files are read slice by
slice (``safe_open(...).get_slice``), torch files are memory-mapped and viewed in place. After a
tensor of an mmap'd torch file is done, its pages are handed back to the kernel (``release``),
so the resident set stays near one chunk instead of growing to the file size.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Literal, Mapping

if TYPE_CHECKING:
    import torch

CHUNK = 1 << 22  # elements per chunk: 32 MiB as float64

_SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
    "U16": "uint16", "U32": "uint32", "U64": "uint64", "BOOL": "bool",
}
_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1,
             "float8_e5m2": 1, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1,
             "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1, "complex64": 8, "complex128": 16}


@dataclass(frozen=True)
class Info:
    dtype: str  # "bfloat16", "float32", ... (torch's name without the "torch." prefix)
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * _ITEMSIZE.get(self.dtype, 4)

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith(("float", "bfloat"))


class Store:
    """Named tensors. Subclasses implement ``names``, ``info``, ``chunks`` and ``get``."""

    def names(self) -> list[str]:
        raise NotImplementedError

    def info(self, name: str) -> Info:
        raise NotImplementedError

    def chunks(self, name: str, size: int = CHUNK) -> Iterator[torch.Tensor]:
        """The tensor's elements in storage order, as flat contiguous chunks."""
        raise NotImplementedError

    def get(self, name: str) -> torch.Tensor:
        """The whole tensor (only for small ones: BatchNorm buffers, scalars)."""
        raise NotImplementedError

    def release(self, name: str) -> None:
        """Done with ``name``: drop what reading it kept resident."""

    def close(self) -> None:
        pass

    def __contains__(self, name: object) -> bool:
        return name in set(self.names())


class TorchStore(Store):
    """Tensors from ``torch.load`` (mmap'd when ``mapped``), keyed by name."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], *, mapped: bool) -> None:
        self._t = dict(tensors)
        self._mapped = mapped

    def names(self) -> list[str]:
        return list(self._t)

    def info(self, name: str) -> Info:
        t = self._t[name]
        return Info(str(t.dtype).removeprefix("torch."), tuple(t.shape))

    def chunks(self, name: str, size: int = CHUNK) -> Iterator[torch.Tensor]:
        t = self._t[name]
        if t.dim() == 0:
            yield t.reshape(1)
            return
        if not t.is_contiguous():  # a saved view: copy one slab of rows at a time, never all of it
            rows = max(1, size // max(1, t[0].numel()))
            for start in range(0, t.shape[0], rows):
                yield t[start : start + rows].reshape(-1)
            return
        flat = t.view(-1)
        for start in range(0, flat.numel(), size):
            chunk = flat[start : start + size]
            yield chunk
            if self._mapped:  # the caller is done with it: drop its pages now
                _dontneed_range(chunk.data_ptr(), chunk.numel() * chunk.element_size())

    def get(self, name: str) -> torch.Tensor:
        return self._t[name]

    def release(self, name: str) -> None:
        if self._mapped:
            _dontneed(self._t[name])


class SafetensorsStore(Store):
    """One ``.safetensors`` file, read tensor by tensor and slice by slice."""

    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        self.path = path
        self._f = safe_open(str(path), framework="pt", device="cpu")
        register_mapped(path)  # safe_open maps the file; slices are views of its pages
        self._names = list(self._f.keys())
        self._info: dict[str, Info] = {}
        self.metadata: dict[str, str] = dict(self._f.metadata() or {})

    def names(self) -> list[str]:
        return list(self._names)

    def info(self, name: str) -> Info:
        if name not in self._info:
            sl = self._f.get_slice(name)
            dtype = _SAFETENSORS_DTYPES.get(sl.get_dtype(), sl.get_dtype().lower())
            self._info[name] = Info(dtype, tuple(sl.get_shape()))
        return self._info[name]

    def chunks(self, name: str, size: int = CHUNK) -> Iterator[torch.Tensor]:
        info = self.info(name)
        if len(info.shape) == 0:
            yield self._f.get_tensor(name).reshape(-1)
            return
        if info.numel == 0:
            return
        row = info.numel // info.shape[0]
        step = max(1, size // row)  # rows per slice; a single row larger than ``size`` is one chunk
        sl = self._f.get_slice(name)
        for start in range(0, info.shape[0], step):
            chunk = sl[start : start + step].reshape(-1)
            yield chunk
            _dontneed_range(chunk.data_ptr(), chunk.numel() * chunk.element_size())

    def get(self, name: str) -> torch.Tensor:
        return self._f.get_tensor(name)

    def close(self) -> None:
        # Drop the handle: safe_open unmaps the file when it is collected. A read after close
        # is our bug and raises; a second close is fine.
        if hasattr(self, "_f"):
            del self._f


class MultiStore(Store):
    """Several stores seen as one (a sharded checkpoint), or a renamed view of one."""

    def __init__(self, parts: Mapping[str, tuple[Store, str]]) -> None:
        self._parts = dict(parts)  # public name -> (store, name in that store)

    def names(self) -> list[str]:
        return list(self._parts)

    def info(self, name: str) -> Info:
        store, key = self._parts[name]
        return store.info(key)

    def chunks(self, name: str, size: int = CHUNK) -> Iterator[torch.Tensor]:
        store, key = self._parts[name]
        return store.chunks(key, size)

    def get(self, name: str) -> torch.Tensor:
        store, key = self._parts[name]
        return store.get(key)

    def release(self, name: str) -> None:
        store, key = self._parts[name]
        store.release(key)

    def close(self) -> None:
        for store in {id(s): s for s, _ in self._parts.values()}.values():
            store.close()


def register_mapped(path: str | Path) -> None:
    """``path`` is memory-mapped by a reader (torch.load(mmap=True), safe_open): its pages may be
    handed back to the kernel once read."""
    try:
        st = os.stat(path)
    except OSError:
        return
    _FILES.add(((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino), os.path.realpath(path)))
    _RANGES.clear()


def _dontneed(t: torch.Tensor) -> None:
    """Hand back the pages of a tensor read from a memory-mapped checkpoint (see below)."""
    storage = t.untyped_storage()
    _dontneed_range(storage.data_ptr(), storage.nbytes())


def _dontneed_range(start: int, nbytes: int, advice: int = 4) -> None:
    """madvise(advice) over the whole pages of [start, start + nbytes) that lie in a private
    mapping of a registered checkpoint file (Linux; a no-op elsewhere). 4 = MADV_DONTNEED: clean
    file-backed pages are dropped and re-read from the file if touched again, so no data changes;
    1 = MADV_RANDOM: no readahead, for sparse reads. Addresses are checked against
    /proc/self/maps, so ordinary memory (where DONTNEED would zero the pages) is never touched.
    """
    global _MADVISE
    if _MADVISE is False or not _FILES or nbytes <= 0:
        return
    try:
        if _MADVISE is None:
            import ctypes
            import sys

            if not sys.platform.startswith("linux"):
                _MADVISE = False
                return
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _MADVISE = libc.madvise
        end = start + nbytes
        if not any(lo <= start < hi for lo, hi in _RANGES):
            _RANGES[:] = _file_ranges()  # a new mapping since the last look
        page = 4096
        for lo, hi in _RANGES:
            a, b = max(lo, start), min(hi, end)
            a = (a + page - 1) // page * page  # whole pages inside the range only
            b = b // page * page
            if b > a:
                _MADVISE(a, b - a, advice)
    except Exception:  # noqa: BLE001 - an optimization only
        _MADVISE = False


def _file_ranges() -> list[tuple[int, int]]:
    """Address ranges of private mappings of the registered files, from /proc/self/maps."""
    keys = {k for k, _ in _FILES}
    paths = {p for _, p in _FILES}
    out = []
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) < 6 or parts[1][3] != "p":  # private mappings only
                continue
            major, minor = (int(x, 16) for x in parts[3].split(":"))
            name = parts[5].strip()
            if ((major, minor, int(parts[4])) in keys) or name in paths:
                lo, hi = parts[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
    return out


_FILES: set[tuple[tuple[int, int, int], str]] = set()
_RANGES: list[tuple[int, int]] = []
# libc's madvise(addr, length, advice); None: not looked up yet; False: not available.
_MADVISE: Callable[[int, int, int], int] | Literal[False] | None = None


# ---------------------------------------------------------------------------------------------
# Statistics. Each chunk is computed in float32 (float64 for float64 tensors) with row-wise
# partial sums of 1024 elements accumulated in float64: relative error ~1e-8, several times
# faster than converting every chunk to float64. Non-finite values make a chunk's sum non-finite;
# only such chunks take the slower exact path that counts and masks them.

_ROW = 1024


def _work(c: torch.Tensor) -> torch.Tensor:
    import torch

    return c if c.dtype in (torch.float32, torch.float64) else c.to(torch.float32)


def _sumsq(c: torch.Tensor) -> float:
    """Sum of squares of a flat float32/float64 chunk."""
    import torch

    n = c.numel()
    k = n - n % _ROW
    total = 0.0
    if k:
        rows = torch.linalg.vector_norm(c[:k].view(-1, _ROW), dim=1).double()
        total += float(torch.dot(rows, rows))
    if n > k:
        tail = c[k:].double()
        total += float(torch.dot(tail, tail))
    return total


def _finite_only(c: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The chunk with NaN/Inf replaced by 0 (in float64), and how many there were."""
    import torch

    c = c.double()
    fin = torch.isfinite(c)
    bad = int(c.numel() - int(fin.sum()))
    return torch.where(fin, c, torch.zeros((), dtype=c.dtype)), bad


@dataclass(frozen=True)
class Stats:
    norm: float  # L2 norm (NaN when the tensor holds NaN/Inf)
    nonfinite: int  # elements that are NaN or +-Inf


def stats(store: Store, name: str) -> Stats:
    """Norm and non-finite count of a float tensor, chunk by chunk."""
    sumsq, bad = 0.0, 0
    for chunk in store.chunks(name):
        c = _work(chunk)
        s = _sumsq(c)
        if not math.isfinite(s):  # NaN/Inf inside, or float32 overflow: count exactly, in float64
            c64, nb = _finite_only(c)
            bad += nb
            s = _sumsq(c64)
        sumsq += s
    return Stats(norm=math.sqrt(sumsq) if not bad else math.nan, nonfinite=bad)


@dataclass(frozen=True)
class DiffStats:
    old_norm: float
    new_norm: float  # NaN when NEW holds NaN/Inf
    delta_norm: float  # ||new - old|| over elements finite in both
    moved: float  # max |new - old| over the same elements
    unchanged: float  # share of elements bit-identical
    new_nonfinite: int


def diff_stats(old: Store, new: Store, name: str, new_name: str | None = None) -> DiffStats:
    """Compare one tensor of two checkpoints element by element, in aligned chunks."""
    import torch

    new_name = new_name or name
    same_dtype = old.info(name).dtype == new.info(new_name).dtype
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    ss_old = ss_new = ss_d = 0.0
    moved, equal, total, bad = 0.0, 0, 0, 0
    for a, b in _paired(old.chunks(name), new.chunks(new_name)):
        bits = ints.get(a.element_size()) if same_dtype else None
        if bits is not None:
            equal += int((a.view(bits) == b.view(bits)).sum())  # bit-identical, NaN == NaN
        a, b = _work(a), _work(b)
        if a.dtype != b.dtype:
            a, b = a.double(), b.double()
        if bits is None:
            equal += int((a == b).sum())
        total += a.numel()
        d = b - a
        sa, sb, sd = _sumsq(a), _sumsq(b), _sumsq(d)
        if not (math.isfinite(sa) and math.isfinite(sb) and math.isfinite(sd)):
            b, nb = _finite_only(b)  # NaN/Inf in NEW are counted; their positions carry no movement
            a, _ = _finite_only(a)
            keep = torch.isfinite(_work(d).double())
            d = torch.where(keep, b - a, torch.zeros((), dtype=b.dtype))
            bad += nb
            sa, sb, sd = _sumsq(a), _sumsq(b), _sumsq(d)
        ss_old += sa
        ss_new += sb
        ss_d += sd
        if d.numel():
            moved = max(moved, float(d.abs().max()))
    return DiffStats(
        old_norm=math.sqrt(ss_old),
        new_norm=math.sqrt(ss_new) if not bad else math.nan,
        delta_norm=math.sqrt(ss_d),
        moved=moved,
        unchanged=equal / total if total else 1.0,
        new_nonfinite=bad,
    )


def _paired(a_iter: Iterator[torch.Tensor], b_iter: Iterator[torch.Tensor]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Re-slice two chunk streams of the same element count into aligned pairs."""
    a = b = None
    while True:
        if a is None or a.numel() == 0:
            a = next(a_iter, None)
        if b is None or b.numel() == 0:
            b = next(b_iter, None)
        if a is None or b is None:
            return
        n = min(a.numel(), b.numel())
        yield a[:n], b[:n]
        a, b = a[n:], b[n:]


def all_equal(t: torch.Tensor, value: float) -> bool:
    """Every element is exactly ``value`` (a small tensor, read whole)."""
    return bool(t.numel()) and bool((t == value).all())

