"""The runs in a folder: which sub-folders and files each hold one run's logs.

A folder is one run when it holds a run's logs directly:

- ``trainer_state.json``, or ``checkpoint-*/trainer_state.json`` (a Hugging Face
  ``output_dir``: every checkpoint holds the history so far, the latest is read; the
  TensorBoard files the Trainer also writes under ``runs/`` repeat the same numbers and are
  left alone);
- ``metrics.csv`` (Lightning's ``CSVLogger``: ``lightning_logs/version_*``);
- ``events.out.tfevents.*`` files (a TensorBoard run; sub-folders that also hold event files,
  as ``add_scalars`` writes, belong to it);
- a W&B run folder (``wandb/run-*`` or ``offline-run-*`` holding a ``run-*.wandb`` file).

Any other folder is walked: each of its CSV/TSV/JSONL files is one run, each sub-folder is
looked at the same way. Nothing is read here but names, so discovery is instant.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# Per-run files in a folder of runs. JSON is left out on purpose: config.json, hparams and
# results files sit beside the logs and are no run.
RUN_FILES = (".csv", ".tsv", ".jsonl", ".ndjson")
_MAX_DEPTH = 8
_SKIP = {".git", "__pycache__", ".ipynb_checkpoints", "node_modules", ".venv"}


@dataclass(frozen=True)
class RunRef:
    """One run to diagnose, as a worker process gets it (plain data, picklable).

    ``kind``: "logs" (``paths`` read by the logs face), "wandb" (``paths[0]`` a run folder)
    or "mlflow" (``uri`` and ``id``). ``name`` is what the fleet view shows (the path under the
    folder given, or the tracker's run name), ``id`` what identifies it for good."""

    kind: str
    name: str
    id: str
    source: str  # the format or tracker: "tensorboard", "csv", "mlflow", ...
    paths: tuple[str, ...] = ()
    uri: str = ""
    meta: dict[str, str] = field(default_factory=dict)


def runs_in(root: Path) -> list[RunRef]:
    """Every run under ``root`` in path order; [] when ``root`` is no folder."""
    if not root.is_dir():
        return []
    out: list[RunRef] = []
    _walk(root, root, out, 0)
    return out


def _name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    return rel if rel != "." else path.name


def _walk(root: Path, folder: Path, out: list[RunRef], depth: int) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return  # an unreadable sub-folder holds no run we could read anyway
    files = [e for e in entries if _is_file(e)]
    dirs = [e for e in entries if _is_dir(e) and e.name not in _SKIP]
    ref = _run_folder(root, folder, files, dirs)
    if ref is not None:
        out.append(ref)
        return
    for f in files:
        suffix = os.path.splitext(f.name)[1].lower()
        if suffix in RUN_FILES:
            source = "csv" if suffix in (".csv", ".tsv") else "jsonl"
            name = _name(root, Path(f.path))
            out.append(RunRef(kind="logs", name=name, id=name, source=source, paths=(f.path,)))
    if depth < _MAX_DEPTH:
        for d in dirs:
            _walk(root, Path(d.path), out, depth + 1)


def _run_folder(root: Path, folder: Path, files: list[os.DirEntry[str]],
                dirs: list[os.DirEntry[str]]) -> RunRef | None:
    """The run ``folder`` holds directly, or None when it is a folder of runs (or of nothing)."""
    names = {f.name for f in files}
    name = _name(root, folder)
    if "trainer_state.json" in names:
        return RunRef(kind="logs", name=name, id=name, source="trainer_state",
                      paths=(str(folder / "trainer_state.json"),))
    checkpoints = [d for d in dirs if re.fullmatch(r"checkpoint-\d+", d.name)
                   and os.path.isfile(os.path.join(d.path, "trainer_state.json"))]
    if checkpoints:
        latest = max(checkpoints, key=lambda d: int(d.name.split("-")[1]))
        return RunRef(kind="logs", name=name, id=name, source="trainer_state",
                      paths=(os.path.join(latest.path, "trainer_state.json"),))
    if "metrics.csv" in names:
        return RunRef(kind="logs", name=name, id=name, source="lightning-csv",
                      paths=(str(folder / "metrics.csv"),))
    if any("tfevents" in n for n in names):
        return RunRef(kind="logs", name=name, id=name, source="tensorboard", paths=(str(folder),))
    if any(n.endswith(".wandb") for n in names) and re.match(r"(offline-)?run-", folder.name):
        run_id = folder.name.rsplit("-", 1)[-1]
        return RunRef(kind="wandb", name=name, id=run_id, source="wandb", paths=(str(folder),))
    return None


def _is_file(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_file()
    except OSError:
        return False


def _is_dir(e: os.DirEntry[str]) -> bool:
    try:  # a linked folder (W&B's latest-run) is a run already found, or a loop
        return e.is_dir(follow_symlinks=False)
    except OSError:
        return False
