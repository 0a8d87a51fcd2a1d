"""What checkpoint file and folder names say: a file meant to resume from, and where the
checkpoints of a folder are."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping


def resume_name(name: str) -> bool:
    """A file name that says "resume from me": ``last_checkpoint.pt``, ``checkpoint_epoch_5.pt``,
    ``ckpt_step1000.pth``, ``latest.pt``, ``resume.pt``. Names of exports and of kept-for-eval
    snapshots (``model.safetensors``, ``pytorch_model.bin``, ``best_model.pt``,
    ``checkpoint_best.pt``, ``final.pt``) are not: bare weights are what they should hold."""
    stem = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name.split(".")[0]).lower()  # lastCheckpoint
    words = set(re.split(r"[^a-z]+", stem)) - {""}
    return bool(words & _RESUME_WORDS) and not words & _EXPORT_WORDS


def export_name(name: str) -> bool:
    """A file name that says "an export": ``model_final.pt``, ``best_model.pt``, ``export.pt``."""
    return bool(_words(name) & _EXPORT_WORDS)


def _words(name: str) -> set[str]:
    stem = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name.split(".")[0]).lower()
    return set(re.split(r"[^a-z]+", stem)) - {""}


_RESUME_WORDS = {"checkpoint", "ckpt", "resume", "last", "latest"}
_EXPORT_WORDS = {"best", "final", "export", "exported", "pretrained", "inference", "release",
                 "pytorch", "ema", "swa", "averaged", "deploy"}


def no_checkpoint_hint(folder: Path, files: Mapping[str, Path]) -> str:
    """The error for a folder that is no checkpoint: its checkpoint folders, or its files."""
    subs = sorted((p for p in folder.iterdir() if p.is_dir()), key=_natural)
    ckpt_dirs = [p.name for p in subs if p.name.startswith(("checkpoint", "ckpt", "step", "global_step"))]
    if ckpt_dirs:
        return (f"{folder} holds no checkpoint itself but {len(ckpt_dirs)} checkpoint folders; "
                f"pick one, e.g. {folder / ckpt_dirs[-1]}")
    cands = sorted(n for n in files if n.endswith((".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".tar")))
    if cands:
        shown = ", ".join(cands[:5]) + (" ..." if len(cands) > 5 else "")
        return f"{folder} is a folder, not one checkpoint; pass one of its files: {shown}"
    return (f"{folder}: no checkpoint found (expected model.safetensors, pytorch_model.bin, "
            "optimizer.pt or a .pt/.ckpt/.safetensors file); pass the checkpoint file itself")


def _natural(p: Path) -> tuple[int, str]:
    digits = "".join(ch for ch in p.name if ch.isdigit())
    return (int(digits) if digits else -1, p.name)
