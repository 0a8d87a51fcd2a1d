"""A launch's working folder: the script reads your files there, and writes only its own.

The script runs in ``<launch folder>/<your folder's name>``. Before it starts, each entry of
your working folder is linked into it (a symlink), and each entry of the folder above into the
launch folder, so that what the script reads under a relative path (nanoGPT's
``configurator.py`` and ``data/shakespeare_char/train.bin``, pygcn's ``../data/cora/``) is your
file, as with ``python train.py``. Left out: what holds checkpoints (a ``.ckpt`` file, a torch
file with an optimizer's state, a ``checkpoint-N`` folder or a ``trainer_state.json``, within
three levels of a folder), so that a script that resumes by itself starts fresh, as the probes
need.

Writes never reach your files through those links. A Python audit hook (``sys.addaudithook``:
the events ``open`` for writing, ``os.mkdir``, ``os.rename``, ``os.remove`` ...) sees each write
before it happens, and inside the launch folder turns the links on its way into real folders
(holding links to their entries) and a linked file into a file of its own (copied, for an
append). ``torch.save`` opens its file in C++, which raises no event: the launch does the same
for it (``own``). A writer in native code (safetensors' Rust) that overwrites a file of yours
through a linked folder is not seen.

The hook cannot be removed (Python keeps audit hooks for the life of the process): outside a
launch it returns at its first test.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

_WRITES = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# event -> (positions of its path arguments, what happens there): "content" a file's bytes
# change, "tree" a folder and all under it goes, "entry" only a name in a folder changes
_EVENTS = {"open": ((0,), "content"), "os.truncate": ((0,), "content"), "shutil.rmtree": ((0,), "tree"),
           "os.mkdir": ((0,), "entry"), "os.rename": ((0, 1), "entry"), "os.remove": ((0,), "entry"),
           "os.rmdir": ((0,), "entry"), "os.symlink": ((1,), "entry"), "os.link": ((1,), "entry")}
_CHECKPOINT_FILE = re.compile(r"\.(ckpt|pt|pth|tar|bin)$")
_CHECKPOINT_DIR = re.compile(r"^checkpoint-\d+$")
_SCAN = 2000  # entries looked at, breadth first, when deciding whether a folder holds checkpoints

_root: str | None = None  # the launch folder, while a launch runs
_installed = False


Links = list[tuple[str, str]]  # (entry to link, where in the launch folder: "name" or "../name")


def links(cwd: Path) -> Links:
    """What every launch links: the entries of ``cwd``, and those of its parent (``../name``),
    less what holds checkpoints. Decided once per preflight: the checkpoint scan reads folders."""
    found: Links = []
    for source, prefix, skip in ((cwd, "", ""), (cwd.parent, "../", cwd.name)):
        if source == cwd and prefix or not source.is_dir():
            continue  # the root folder is its own parent
        try:
            entries = list(os.scandir(source))
        except OSError:
            continue
        found += [(entry.path, prefix + entry.name) for entry in entries
                  if entry.name != skip and not _holds_checkpoints(entry)]
    return found


def prepare(folder: Path, cwd: Path, linked: Links) -> Path:
    """The script's working folder in ``folder``, named as ``cwd``, with ``linked`` in place."""
    work = folder / (cwd.name or "work")
    work.mkdir(parents=True, exist_ok=True)
    for path, name in linked:
        link = work / name
        if link.exists() or link.is_symlink():  # the resume probe's relaunch: its folder is ready
            continue
        try:
            os.symlink(path, link)
        except OSError:
            pass
    return work


def _holds_checkpoints(entry: os.DirEntry[str]) -> bool:
    """A checkpoint file, or a folder with one within three levels (Lightning's
    ``lightning_logs/version_0/checkpoints/last.ckpt``), among the first ``_SCAN`` entries."""
    try:
        if entry.is_file():
            return _checkpoint_file(entry)
        if not entry.is_dir() or _CHECKPOINT_DIR.match(entry.name):
            return entry.is_dir()
        folders, seen = [(entry.path, 1)], 0
        while folders and seen < _SCAN:
            path, depth = folders.pop(0)
            with os.scandir(path) as it:
                for child in it:
                    seen += 1
                    if child.name == "trainer_state.json" or _CHECKPOINT_DIR.match(child.name) or \
                            child.is_file() and _checkpoint_file(child):
                        return True
                    if child.is_dir(follow_symlinks=False) and depth < 3:
                        folders.append((child.path, depth + 1))
                    if seen >= _SCAN:
                        break
    except OSError:
        pass
    return False


def _checkpoint_file(entry: os.DirEntry[str]) -> bool:
    return bool(_CHECKPOINT_FILE.search(entry.name)) and (entry.name.endswith(".ckpt") or _torch_file(entry.path))


def _torch_file(path: str) -> bool:
    """A torch.save file holding an optimizer's state: one to resume from, not data or
    pretrained weights (nanoGPT's raw ``train.bin``, a tensor saved as ``traindata.pt``). Read
    as bytes, never unpickled: the zip's pickle (names only, no tensor data) or a legacy file's
    first megabyte."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            if head == b"PK":
                with zipfile.ZipFile(path) as z:
                    pickled = next((n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
                    return pickled is not None and b"optimizer" in z.read(pickled)
            return head[:1] == b"\x80" and b"optimizer" in head + f.read(1 << 20)
    except (OSError, zipfile.BadZipFile):
        return False


def guard_writes(folder: Path) -> None:
    """Writes inside ``folder`` are made the launch's own from now on, until ``end_guard``."""
    global _root, _installed
    _root = os.path.realpath(folder) + os.sep
    if not _installed:
        sys.addaudithook(_audit)
        _installed = True


def end_guard() -> None:
    global _root
    _root = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _root is None or event not in _EVENTS:
        return
    keep = True
    if event == "open":
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        if not flags & _WRITES:
            return
        keep = not flags & os.O_TRUNC
    positions, change = _EVENTS[event]
    for i in positions:
        if i < len(args) and isinstance(args[i], (str, os.PathLike)):
            try:
                own(args[i], change, keep)
            except OSError:
                pass  # the script's own call reports what is wrong with its path


def own(path: Any, change: str = "content", keep: bool = False) -> None:
    """Make ``path``, about to change, the launch's own: each linked folder on its way becomes
    a real folder of links to its entries; at the end, a linked file whose bytes change
    (``content``) a copy (``keep``) or nothing yet, a linked folder that goes (``tree``) a real one."""
    root = _root
    if root is None:
        return
    full = os.path.abspath(os.fspath(path))
    if not isinstance(full, str) or not (full + os.sep).startswith(root):
        return
    parts = [p for p in full[len(root):].split(os.sep) if p]
    at = root.rstrip(os.sep)
    for i, part in enumerate(parts):
        at = os.path.join(at, part)
        last = i == len(parts) - 1
        if not os.path.islink(at):
            if last or not os.path.isdir(at):
                return
            continue
        target = os.path.realpath(at)
        if (target + os.sep).startswith(root) or last and change == "entry":
            return  # the script's own link, or a name that changes: your file stays as it is
        if os.path.isdir(target) and (not last or change == "tree"):
            os.unlink(at)
            os.mkdir(at)
            for entry in os.scandir(target):
                os.symlink(entry.path, os.path.join(at, entry.name))
        elif last and change == "content":
            os.unlink(at)
            if keep and os.path.isfile(target):
                shutil.copy2(target, at)
        else:
            return
