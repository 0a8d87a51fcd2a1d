"""What counts a checkpoint's steps: the keys a step, an epoch or training metadata is saved
under, and the integers a training-state dict holds under other names (the candidates for a step
counter such as nanoGPT's ``iter_num``, which ``read.find_step`` recognizes by value). Shared by
the checkpoint reader and the live probe that sees ``torch.save``."""

from __future__ import annotations

import math
from typing import Mapping

STEP_KEYS = ("global_step", "step", "iteration", "iter", "num_updates", "steps", "train_step",
             "current_step", "global_steps", "num_steps_done")
EPOCH_KEYS = ("epoch", "epochs", "current_epoch")
META_KEYS = ("meta", "metadata", "trainer_state", "train_state", "state", "progress")
_TOTALS = ("epochs", "steps", "global_steps")  # in a config: the run's length, not its progress


def counters(obj: object) -> dict[str, int]:
    """The non-negative integers a training-state dict holds at its top level (or in a metadata
    dict, as ``meta.key``) under names that are not known step, epoch or RNG keys: the
    candidates for a step counter. Only references are read (a CPU tensor's one element at most)."""
    out: dict[str, int] = {}
    if not isinstance(obj, Mapping):
        return out
    for key, value in obj.items():
        k = str(key)
        if k in STEP_KEYS or k in EPOCH_KEYS or is_rng_key(k):
            continue
        n = _counter(value)
        if n is not None:
            out[k] = n
        elif isinstance(value, Mapping) and k in META_KEYS:
            for mk, mv in value.items():
                m = _counter(mv) if str(mk) not in STEP_KEYS + EPOCH_KEYS else None
                if m is not None:
                    out[f"{k}.{mk}"] = m
        if len(out) >= 64:
            break
    return out


def is_progress(value: object) -> bool:
    """A small dict of counters alone, one under a step or epoch key, whatever its own key:
    a loop's progress saved beside the weights (PyTorch-Ignite's engine state,
    ``{"trainer": {"epoch_length": 32, "iteration": 128, "max_epochs": 4}}``). A config also
    holds rates, names and flags, so it is none; and a plural (``epochs``, ``steps``) counts the
    run's length in a config of integers alone (``{"args": {"epochs": 90, "bs": 128}}``)."""
    if not isinstance(value, Mapping) or not 0 < len(value) <= 16:
        return False
    if not any(str(k) in STEP_KEYS + EPOCH_KEYS and str(k) not in _TOTALS for k in value):
        return False
    return all(isinstance(v, int) and not isinstance(v, bool) for v in value.values())


def is_rng_key(k: str) -> bool:
    k = k.lower()
    return "rng" in k or k in ("random_state", "random_states", "generator_state", "seed_state")


def _counter(value: object) -> int | None:
    """A non-negative int, or a one-element integer tensor on the CPU (no device read); None
    otherwise. Floats are never counters: a loss may happen to be integral."""
    import torch

    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
        return None
    try:
        if value.numel() != 1 or value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
            return None
        n = int(value.item())
    except Exception:  # noqa: BLE001 - a tensor subclass or a fake tensor: not a counter
        return None
    return n if n >= 0 else None


def int_like(value: object) -> int | None:
    """An int from an int, an integral float or a 0-d tensor; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if hasattr(value, "numel") and hasattr(value, "item"):
        try:
            if value.numel() == 1:
                return int_like(value.item())
        except Exception:  # noqa: BLE001
            return None
    return None
