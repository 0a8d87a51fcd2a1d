"""Metrics a script only prints, read from its stdout.

**From stdout.** While the run is watched ``sys.stdout`` is a stand-in that hands every write to
the real stream first, unchanged, then reads complete lines (``\\n`` or ``\\r``) that hold a
digit for ``name value`` pairs (``val_acc 0.1``, ``val_acc: 0.1``, ``val_acc=0.1``, ``'val_acc':
0.1``, ``Val Acc: 10.0%``, ``acc tensor(0.1000)``, ``Accuracy: 98/100``): percentages and
ratios become fractions. Names are read as log columns (``sources/logs/mapping.py``); a name
without a split (``acc``, ``f1``, ``loss``) takes the split named before it on the same line
(``Val loss 0.3, acc 0.5``; ``val_loss=0.3 f1=0.0``), and an unsplit accuracy or F1 printed right
after an evaluation (its loss calls, or the trained model in eval mode) is a validation one.
Names the heuristics do not know are left out. The last value of each name in a step is
published (a progress bar's refreshes count once) when the step ends, through the same
Publisher as TensorBoard or wandb: a signal logged there first keeps its owner. Only the thread
and process that started the watch are read; a line is parsed with one regular expression,
compiled once.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from typing import Any, Callable

from traindoc.live.probes.publisher import Publisher
from traindoc.live.session import Session
from traindoc.sources.logs import mapping

_MAX_LINE = 1024  # characters of a line read (the rest of a longer line is not)
_MAX_LINES = 256  # lines read per write
_BREAK = re.compile(r"\r\n|\r|\n")
_DIGIT = re.compile(r"\d")
# name (1-4 words: letters first, then letters, digits, _ . / -; the last one may end in a
# threshold, "F1@0.9"), an optional quote and ":" or "=", then a number (optionally inside
# tensor(...)) that does not touch the name ("F1 (macro): 0.0" is no "F" of 1), an optional
# "/ total" and "%".
_PAIR = re.compile(
    r"(?<![\w.])([A-Za-z][\w./-]*(?: [A-Za-z][\w./-]*){0,3}(?:@\d+(?:\.\d+)?)?)['\"]?\s*[:=]?\s*"
    r"(?:tensor\(\s*)?(?<![\w.])([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
    r"(?:\s*/\s*(\d+(?:\.\d*)?))?(\s*%)?(?![\w%]|\.\d)",
    re.IGNORECASE,
)
_SPLITS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
           "eval": "val", "evaluation": "val", "dev": "val", "test": "test", "testing": "test"}
_TAKES_SPLIT = frozenset({"loss", "train_acc", "train_f1"})


@functools.lru_cache(maxsize=1024)
def _reading(key: str) -> tuple[str, bool, bool]:
    """(the key's own split, can it take the line's split, is it an accuracy or F1)."""
    ws = mapping.words(key)
    own = next((_SPLITS[w] for w in reversed(ws) if w in _SPLITS), "")
    signal = mapping.guess(key).signal or ""
    takes = signal in _TAKES_SPLIT or signal.startswith("metric.")
    return own, takes, signal in ("train_acc", "train_f1")


@functools.lru_cache(maxsize=1024)
def _canonical(key: str) -> str:
    """``Val Acc``, ``val-acc``, ``VAL_ACC``, ``valAcc`` -> ``val_acc``: one name per metric
    however a line spells it (the Publisher gives a signal to the first name that logs it)."""
    return "_".join(mapping.words(key))


_SPLIT_WORD = re.compile(r"(?<![A-Za-z])(" + "|".join(_SPLITS) + r")(?![a-z])", re.IGNORECASE)


def _split_words(text: str) -> str:
    """The last split word (train / val / test ...) in free text, "" when none."""
    found = _SPLIT_WORD.findall(text) if text.strip() else ()
    return _SPLITS[found[-1].lower()] if found else ""


def parse_line(line: str, evaluating: bool = False) -> dict[str, float]:
    """The ``name value`` pairs of one printed line, names given the split they are printed
    under (see the module docstring). ``evaluating``: an evaluation just ran."""
    out: dict[str, float] = {}
    split, pos = "", 0
    for m in _PAIR.finditer(line):
        split = _split_words(line[pos:m.start()]) or split
        pos = m.end()
        key = _canonical(m.group(1).split("@", 1)[0])  # F1@0.9 is an F1 (its threshold dropped)
        own, takes, scored = _reading(key)
        if own:
            split = own
        elif takes and split:
            key = f"{split}_{key}"
        elif scored and evaluating:
            key = f"val_{key}"
        try:
            value = float(m.group(2))
        except ValueError:
            continue
        if m.group(3) is not None:
            total = float(m.group(3))
            if not total > 0:
                continue
            value /= total
        elif m.group(4) is not None:
            value /= 100.0
        out[key] = value
    return out


class Printed:
    """Reads the lines the script prints (the stdout stand-in calls ``feed``)."""

    def __init__(self, session: Session, pub: Publisher, in_evaluation: Callable[[], bool],
                 guard: Callable[..., None], wake: Callable[[], None]) -> None:
        self.s = session
        self.pub = pub
        self.in_evaluation = in_evaluation  # has an evaluation run since the last backward?
        self._wake = wake  # values are held: publish them at the round's end
        self._guard = guard  # Patcher.guard: an error disables the reading, never the script
        self.active = False
        self._stream: Any = None
        self._tee: _Tee | None = None
        self._thread = 0
        self._pid = 0
        self._buf: list[str] = []
        self._size = 0
        self._held: dict[str, float] = {}
        self._held_step = 0
        self._busy = False

    def install(self) -> None:
        if sys.stdout is None:
            return
        self._thread, self._pid = threading.get_ident(), os.getpid()
        self._stream = sys.stdout
        self._tee = _Tee(sys.stdout, self)
        self.active = True
        sys.stdout = self._tee

    def uninstall(self) -> None:
        if self.active:
            self._guard("stdout", self.publish)
        self.active = False
        if self._tee is not None and sys.stdout is self._tee:
            sys.stdout = self._stream
        self._tee = None

    def mine(self) -> bool:
        return threading.get_ident() == self._thread and os.getpid() == self._pid

    def read(self, text: str) -> None:
        if self._busy:  # something we called printed: not the script's line
            return
        self._busy = True
        try:
            self._guard("stdout", self.feed, text)  # an error disables the reading only
        finally:
            self._busy = False

    def feed(self, text: str) -> None:
        if "\n" not in text and "\r" not in text:
            if self._size < _MAX_LINE:
                self._buf.append(text)
                self._size += len(text)
            return
        if self._buf:
            text = "".join(self._buf) + text
        if not _DIGIT.search(text):  # nothing to read: keep the unfinished line only
            rest = text[max(text.rfind("\n"), text.rfind("\r")) + 1:]
            self._buf, self._size = ([rest], len(rest)) if rest else ([], 0)
            return
        lines = _BREAK.split(text)
        rest = lines.pop()
        self._buf, self._size = ([rest], len(rest)) if rest else ([], 0)
        evaluating: bool | None = None
        for line in lines[:_MAX_LINES]:
            if not _DIGIT.search(line):
                continue
            if evaluating is None:
                evaluating = self.in_evaluation()
            values = parse_line(line[:_MAX_LINE], evaluating)
            if values:
                self.hold(values)

    def hold(self, values: dict[str, float]) -> None:
        step = self.s.clock.current_step
        if self._held and step != self._held_step:
            self.publish()
        self._held_step = step
        self._held.update(values)
        self._wake()

    @property
    def held(self) -> bool:
        """Are metrics read from printed lines waiting to be published?"""
        return bool(self._held)

    def publish(self) -> None:
        held, self._held = self._held, {}
        if held:
            self.pub.publish("stdout", held, step=self._held_step)


class _Tee:
    """Stands in for ``sys.stdout``: every write goes to the real stream first, unchanged (its
    result and its exceptions are the real stream's), then the text is read. Everything else
    is the real stream's (``fileno``, ``isatty``, ``encoding``, ``buffer`` ...)."""

    def __init__(self, stream: Any, printed: Printed) -> None:
        self._stream = stream
        self._printed = printed

    def write(self, text: Any) -> Any:
        out = self._stream.write(text)
        printed = self._printed
        if printed.active and type(text) is str and printed.mine():
            printed.read(text)
        return out

    def writelines(self, lines: Any) -> Any:
        lines = list(lines)
        out = self._stream.writelines(lines)
        printed = self._printed
        if printed.active and printed.mine() and all(type(x) is str for x in lines):
            printed.read("".join(lines))
        return out

    def flush(self) -> Any:
        return self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
