"""One line of progress on stderr while long work runs (lint of a big tree, a large log, a
checkpoint diff): only on a terminal, only after the work has taken half a second, redrawn at
most ten times a second, erased when the work ends. In a file or a CI log nothing is written."""

from __future__ import annotations

import os
import shutil
import sys
import time
from types import TracebackType
from typing import TextIO

from traindoc.report import safe


class Progress:
    def __init__(self, label: str, total: int | None = None, *, stream: TextIO | None = None,
                 after: float = 0.5) -> None:
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.on = bool(isatty and isatty()) and not os.environ.get("TRAINDOC_NO_PROGRESS")
        self.label, self.total = label, total
        self._start = time.monotonic() + after
        self._next = self._start
        self._drawn = 0  # characters on the line now

    def update(self, done: int, detail: str = "") -> None:
        if not self.on:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 0.1
        count = f"{done:,}/{self.total:,}" if self.total else f"{done:,}"
        # detail names a user's file or tensor: escaped, so a name cannot move the cursor
        text = f"{self.label}: {count}" + (f" {safe.terminal(detail)}" if detail else "")
        width = shutil.get_terminal_size((80, 24)).columns - 1
        text = text[:width]
        self.stream.write("\r" + text + " " * max(0, self._drawn - len(text)))
        self.stream.flush()
        self._drawn = len(text)

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()
            self._drawn = 0

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
