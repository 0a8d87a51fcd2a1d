"""The user's files outside the sandbox: what the script's checkpoints would overwrite or leave.

Relative paths land in the sandbox (the launches' working folder, ``sandbox.py``). A script that saves to an
absolute path elsewhere (``--out /data/ckpt``) would leave its checkpoints there, or overwrite
the user's real ones. Every ``torch.save`` onto a path outside the sandbox, and every
``os.replace`` / ``os.rename`` there of a file ``torch.save`` wrote, goes through
``before_write``: a file that exists is copied aside first (once), a new one is remembered; ``restore``, after each launch, puts the copies back and
removes the new files, so that no launch resumes from another launch's checkpoint.
Files written by other means (``open``, ``np.save``) are not covered. ``inside`` tells whether a
path or an open file (fsspec's, Lightning's) is in the sandbox.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any


class Outside:
    def __init__(self, backup: Path) -> None:
        self._backup = backup
        self.created: list[str] = []
        self.saved_aside: dict[str, str] = {}  # the user's file -> its copy

    def before_write(self, path: str) -> None:
        if path in self.created or path in self.saved_aside:
            return
        if os.path.isfile(path):
            self._backup.mkdir(parents=True, exist_ok=True)
            copy = str(self._backup / f"{len(self.saved_aside)}-{Path(path).name}")
            shutil.copy2(path, copy)
            self.saved_aside[path] = copy
        else:
            self.created.append(path)

    def wrote(self, path: str) -> bool:
        """Did a launch write ``path`` since the last ``restore`` (a checkpoint to resume from)?"""
        return path in self.created or path in self.saved_aside

    def restore(self) -> tuple[list[str], list[str]]:
        """Remove the files preflight created, put back the ones it overwrote; return both lists."""
        removed = []
        for path in self.created:
            if os.path.isfile(path):
                os.remove(path)
                removed.append(path)
        restored = []
        for path, copy in self.saved_aside.items():
            if os.path.isdir(os.path.dirname(path)):  # else the script removed its own folder
                shutil.copy2(copy, path)
                restored.append(path)
        self.created, self.saved_aside = [], {}
        return removed, sorted(restored)


def inside(f: Any, sandbox: Path) -> str:
    """The path of ``f`` (a path, or an open file: its ``path`` or ``name``) relative to the
    sandbox, "" for a file elsewhere or a buffer."""
    if not isinstance(f, (str, os.PathLike)):
        f = getattr(f, "path", None) or getattr(f, "name", None)
        if not isinstance(f, (str, os.PathLike)):
            return ""
    path = Path(os.path.abspath(os.fspath(f)))
    try:
        return str(path.relative_to(sandbox.resolve()))
    except ValueError:
        try:
            return str(path.relative_to(sandbox))
        except ValueError:
            return ""
