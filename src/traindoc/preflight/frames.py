"""What the script's call stack tells a launch: which trainer steps, its generators, its line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def framework(frame: Any) -> str:
    """Which trainer calls ``optimizer.step()``: a frame of its package on the stack."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("transformers."):
            return "transformers"
        if module.startswith(("lightning.", "pytorch_lightning.")):
            return "lightning"
        frame = frame.f_back
    return ""


def generators(frame: Any) -> list[torch.Generator]:
    """The torch.Generator objects in the variables of ``frame`` and its callers (the script's
    ``gen = torch.Generator().manual_seed(0)``); generators are not tracked by ``gc``."""
    found: list[torch.Generator] = []
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for value in list(scope.values()):
                if isinstance(value, torch.Generator) and all(value is not g for g in found):
                    found.append(value)
        frame = frame.f_back
    return found


def user_line(exc: BaseException, script: Path) -> str:
    """`` (at train.py:42)``: the last frame of the exception in the script's folder."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if Path(fn).resolve().parent == script.parent:
            where = f" (at {Path(fn).name}:{tb.tb_lineno})"
        tb = tb.tb_next
    return where
