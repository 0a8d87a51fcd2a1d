"""The CSV reader's fast path: a plain numeric metrics log parsed in bulk with numpy.

Python's ``float()`` costs ~250 ns a cell on a slow core, 0.75 s for a million rows of three
columns; here a column of a million costs ~60 ms. The rows are cut at the separator bytes in
one pass; the cells of a column are grouped by *template* (the cell with every digit replaced
by ``0``: ``2.51234`` -> ``0.00000``), and a template fixes where the sign, dot, exponent and
digits are, so a group's mantissas are one small matrix product (digit values times powers of
ten, exact integers) and its values one division (or product) by a power of ten. That step is
correctly rounded (Clinger's fast path: an exact mantissa below 2**53 and an exact power of
ten up to 10**22), so every value is bit for bit what ``float()`` returns. Cells outside that
case (16+ digits, spaces, ``1_000``, far exponents) go through ``float()``/``int()`` one by
one; cells without a digit (``nan``, ``inf``) are one text per template, converted once.

``split`` returns None, and the caller takes the general path, for any file this module does
not read exactly as the general path does: quotes, blank or ragged lines, a repeated header,
line breaks other than ``\\n``, non-ASCII bytes in the rows. ``numbers`` returns None for a
column with a text cell (the general path notes and skips those).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from traindoc.sources.logs._bulk import find_byte, unaligned

MAX_CELL = 24  # longer cells go through float(): no float literal of <= 15 digits needs more
_MAX_TEMPLATES = 16  # per cell length; a column this varied goes through float() beyond that
# Characters that split lines for str.splitlines (the general path) but not here, and quotes.
_NOT_PLAIN = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", '"')
# A cell template (digits as 0) of a float literal: sign, digits, dot, digits, exponent.
_LITERAL = re.compile(rb"([+-]?)(0*)(?:(\.)(0*))?(?:[eE]([+-]?)(0{1,3}))?")
_POW10 = 10.0 ** np.arange(23)  # exact in float64
_ZEROS, _HIGH, _LOW7, _ONES = (np.uint64(b * 0x0101010101010101) for b in (0x30, 0x80, 0x7F, 0x01))
_ROWS = 1 << 17  # rows converted at a time: the float32 copy stays small (see _bulk.BLOCK)


@dataclass
class Grid:
    """The rows of a CSV file cut into cells: ``starts``/``ends`` hold byte offsets into ``buf``
    (the file's bytes), one array per column; ``text_offset`` turns a byte offset of the
    (ASCII) rows into an index of ``text``."""

    text: str
    buf: np.ndarray
    words: np.ndarray  # words[i]: the 8 bytes from buf[i] on, as one little-endian uint64
    starts: list[np.ndarray]
    ends: list[np.ndarray]
    text_offset: int

    @property
    def rows(self) -> int:
        return len(self.starts[0])


@dataclass
class Numbers:
    """A column as numbers: ``values`` (nan where a cell is empty), ``empty`` (None when no cell
    is), and ``ints`` when asked for and every cell is an ``int()`` literal."""

    values: np.ndarray
    empty: np.ndarray | None
    ints: np.ndarray | None


def split(text: str, head: str, delim: str, data: bytes | None = None) -> tuple[Grid, bool] | None:
    """The rows after the first line ``head`` as a Grid, and whether the last row was cut short
    (dropped, as the general path does); None when the general path must read the file.
    ``data``: the file's bytes when at hand (``text`` is them decoded), else ``text`` is encoded."""
    if not text.startswith(head + "\n") or '"' in head or len(head.splitlines()) != 1:
        return None
    if all(c == "" or _is_float(c) for c in head.split(delim)):
        return None  # a numeric header: a repeat of it in the rows would look like data
    if any(ch in text for ch in _NOT_PLAIN):  # one fast scan each, ~3 ms per 30 MB
        return None
    start, end, cut = len(head) + 1, len(text), False
    if not text.endswith("\n"):
        last_nl = text.rfind("\n")
        last = text[last_nl + 1:]
        if not last.strip():
            return None  # whitespace after the last newline: the general path drops it quietly
        if last.count(delim) < head.count(delim):
            cut, end = True, last_nl + 1
    if end <= start:
        return None
    raw = text.encode("utf-8") if data is None else data
    bom = 3 if raw.startswith(b"\xef\xbb\xbf") and not text.startswith("\ufeff") else 0
    buf = np.frombuffer(raw, np.uint8)
    offset = len(raw) - len(text)  # the BOM and bytes beyond one per character (non-ASCII)
    if offset != bom + len(head.encode("utf-8")) - len(head):
        return None  # non-ASCII characters in the rows, where byte and character offsets differ
    b0, b1 = start + offset, end + offset
    newlines, delims = find_byte(buf, b0, b1, 0x0A), find_byte(buf, b0, b1, ord(delim))
    if b1 == len(buf) and buf[-1] != 0x0A:
        newlines = np.append(newlines, b1)  # the last row, complete but without its newline
    ncol, nrows = head.count(delim) + 1, len(newlines)
    if len(delims) != nrows * (ncol - 1):
        return None
    delims = delims.reshape(nrows, ncol - 1)
    row_starts = np.empty(nrows, np.int64)
    row_starts[0] = b0
    row_starts[1:] = newlines[:-1] + 1
    # Each row's delimiters lie between its start and its newline: no blank, short or long rows.
    if not ((delims[:, 0] >= row_starts).all() and (delims[:, -1] < newlines).all()):
        return None
    if delim.isspace() and (newlines - row_starts == ncol - 1).any():
        return None  # a row of tabs only: a blank line, which the general path skips
    starts = [row_starts] + [delims[:, k] + 1 for k in range(ncol - 1)]
    ends = [delims[:, k] for k in range(ncol - 1)] + [newlines]
    return Grid(text, buf, unaligned(raw, "<u8"), starts, ends, offset), cut


def numbers(grid: Grid, j: int, want_ints: bool = False) -> Numbers | None:
    """Column ``j`` as numbers; None when a cell is text (not a number, not empty)."""
    n = grid.rows
    starts = grid.starts[j]
    lengths = grid.ends[j] - starts
    values = np.empty(n)
    ints = np.empty(n, np.int64) if want_ints else None
    all_ints = want_ints
    slow: list[np.ndarray] = []  # rows whose cells go through float() / int()
    size = np.minimum(lengths, MAX_CELL + 1).astype(np.uint8)
    order = np.argsort(size, kind="stable")  # a radix sort: groups the rows by cell length
    bounds = np.cumsum(np.bincount(size, minlength=MAX_CELL + 2))
    empty = order[:bounds[0]]
    values[empty] = np.nan
    all_ints = all_ints and not len(empty)
    slow.append(order[bounds[MAX_CELL]:])
    for length in range(1, MAX_CELL + 1):
        rows = order[bounds[length - 1]:bounds[length]]
        if not len(rows):
            continue
        # Cells as whole 8-byte words (the bytes past a cell are the next cells'; templates
        # mask them and weights ignore them); the last few cells of the file, whose words
        # would run past its end, go through float().
        nwords = -(-length // 8)
        at = starts[rows]
        at_end = at > len(grid.buf) - 8 * nwords
        if at_end.any():
            slow.append(rows[at_end])
            rows, at = rows[~at_end], at[~at_end]
            if not len(rows):
                continue
        words = [grid.words[at + 8 * w] for w in range(nwords)]  # word w of each cell
        for group, spec, template in _templates(words, length):
            at = rows[group]
            if spec is None and b"0" not in template:
                # No digit: every cell of the group is this text (nan, inf, a word): one float().
                try:
                    values[at] = float(template.decode("ascii"))
                except ValueError:
                    return None  # a text cell
                all_ints = False
                continue
            if spec is None:
                slow.append(at)
                continue
            vals, fast = _convert(words, None if len(group) == len(rows) else group, spec)
            if fast is None:
                values[at] = vals
            else:
                values[at[fast]] = vals[fast]
                slow.append(at[~fast])
            if ints is not None and spec.is_int:  # ints: when want_ints
                ints[at] = vals  # exact: at most 15 digits
            all_ints = all_ints and spec.is_int
    rest = np.concatenate(slow)
    if len(rest):
        text, at = grid.text, (starts[rest] - grid.text_offset).tolist()
        cells = [text[a:a + k] for a, k in zip(at, lengths[rest].tolist())]
        try:
            values[rest] = list(map(float, cells))
        except ValueError:
            return None  # a text cell
        if all_ints and ints is not None:  # all_ints implies want_ints, hence ints
            try:
                whole = list(map(int, cells))
            except ValueError:
                all_ints = False
            else:
                if not all(-2**63 <= w < 2**63 for w in whole):
                    return None
                ints[rest] = whole
    return Numbers(values, None if not len(empty) else _mask(n, empty),
                   ints if all_ints else None)


@dataclass(frozen=True)
class _Spec:
    """What a template says: the weights of its digits by position, the digits after the dot,
    the signs, and whether ``int()`` reads it.

    The mantissa's digits are weighted in columns of 7 (units, 10**7s, 10**14s), the
    exponent's in a last column: every product and partial sum is an integer below 2**24,
    exact in float32, whose matrix product is three times faster than float64's."""

    weights: np.ndarray  # (length, columns) float32; 0 where no digit
    parts: int  # mantissa columns
    frac: int
    negative: bool
    exp_negative: bool
    has_exp: bool
    is_int: bool


@lru_cache(maxsize=1024)
def _spec(template: bytes) -> _Spec | None:
    m = _LITERAL.fullmatch(template)
    if m is None:
        return None
    sign, whole, dot, frac, exp_sign, exp = m.groups()
    frac = frac or b""
    digits = len(whole) + len(frac)
    if not 1 <= digits <= 15:  # 15 digits: the mantissa stays below 2**53, exact in float64
        return None
    parts = -(-digits // 7)
    weights = np.zeros((len(template), parts + (exp is not None)), np.float32)
    k = digits
    for i, ch in enumerate(template[:m.end(4) if dot else m.end(2)]):
        if ch == 0x30:
            k -= 1
            weights[i, k // 7] = 10.0 ** (k % 7)
    if exp is not None:
        for i in range(len(exp)):
            weights[len(template) - 1 - i, -1] = 10.0 ** i
    return _Spec(weights, parts, len(frac), sign == b"-", exp_sign == b"-", exp is not None,
                 not dot and exp is None)


def _templates(words: list[np.ndarray], length: int) -> list[tuple[np.ndarray, _Spec | None, bytes]]:
    """The cells of ``length`` bytes (``words[w]``: their word w) grouped by template: each
    group with its template's spec and the template itself."""
    keep = np.zeros(len(words) * 8, np.uint8)
    keep[:length] = 0xFF
    keys = [_template(word) & mask for word, mask in zip(words, keep.view("<u8"))]
    out: list[tuple[np.ndarray, _Spec | None, bytes]] = []
    left: np.ndarray | None = None  # cells not grouped yet; None: all (no gathers the first round)
    while left is None or len(left):
        first = 0 if left is None else int(left[0])
        if len(out) == _MAX_TEMPLATES and left is not None:  # left is None in the first round only
            out.append((left, None, b"0"))  # mixed templates: cell by cell
            break
        same = (keys[0] if left is None else keys[0][left]) == keys[0][first]
        for key in keys[1:]:
            same &= (key if left is None else key[left]) == key[first]
        if left is None:
            group, left = np.flatnonzero(same), np.flatnonzero(~same)
        else:
            group, left = left[same], left[~same]
        template = b"".join(int(key[first]).to_bytes(8, "little") for key in keys)[:length]
        out.append((group, _spec(template), template))
    return out


def _template(word: np.ndarray) -> np.ndarray:
    """Each word with its digit bytes replaced by "0". x = byte ^ "0" is 0..9 for a digit; the
    high bit of (x & 0x7F) + 0x76, or of x, is set for any other byte (no carry crosses a
    byte). In place, in two buffers: fresh temporaries this size cost page faults in a new
    process."""
    x = word ^ _ZEROS
    t: np.ndarray = x & _LOW7  # annotated: some mypy versions infer a bool array here
    t += np.uint64(0x7676767676767676)
    t |= x
    t &= _HIGH
    t >>= np.uint64(7)
    t ^= _ONES
    t *= np.uint64(0xFF)  # 0xFF in the digits' bytes
    np.bitwise_and(word, ~t, out=x)
    t &= _ZEROS
    x |= t
    return x


def _convert(words: list[np.ndarray], group: np.ndarray | None, spec: _Spec
             ) -> tuple[np.ndarray, np.ndarray | None]:
    """The values of the cells ``group`` (None: all), and where they are exact (None: all; the
    rest go through float())."""
    n = len(words[0]) if group is None else len(group)
    length = len(spec.weights)
    chunks: list[np.ndarray] = []
    for i in range(0, n, _ROWS):  # a slice at a time: the float32 copies stay small
        acc: np.ndarray | None = None  # the slice's sums over the words so far
        for w, word in enumerate(words):
            part = word[i:i + _ROWS] if group is None else word[group[i:i + _ROWS]]
            width = min(8, length - 8 * w)
            # Digit values (other bytes wrap around; their weights are 0), as float32.
            digits = part.view(np.uint8).reshape(-1, 8)[:, :width] - np.uint8(0x30)
            product = digits.astype(np.float32) @ spec.weights[8 * w:8 * w + width]
            acc = product if acc is None else acc + product  # still below 2**24: exact
        assert acc is not None  # words is never empty: a cell has at least one
        chunks.append(acc)
    sums = np.concatenate(chunks)
    mantissa = sums[:, 0].astype(np.float64)
    for k in range(1, spec.parts):
        mantissa += sums[:, k].astype(np.float64) * 10.0 ** (7 * k)  # exact: below 2**53
    fast = None
    if not spec.has_exp:
        vals = mantissa / _POW10[spec.frac] if spec.frac else mantissa
    else:
        exp = sums[:, -1].astype(np.float64)
        power = (-exp if spec.exp_negative else exp) - spec.frac
        fast = np.abs(power) <= 22
        scale = _POW10[np.minimum(np.abs(power), 22).astype(np.int64)]
        vals = np.where(power >= 0, mantissa * scale, mantissa / scale)
    return (-vals if spec.negative else vals), fast


def _mask(n: int, rows: np.ndarray) -> np.ndarray:
    m = np.zeros(n, bool)
    m[rows] = True
    return m


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
