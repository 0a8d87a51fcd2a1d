"""DeepSpeed checkpoints: what ``engine.save_checkpoint(save_dir)`` writes into
``save_dir/global_stepN/``.

- ``mp_rank_00_model_states.pt``: the model's state_dict under ``module``, the step
  (``global_steps``), the LR scheduler's state, the config (``ds_config``), the client state the
  script passed, and ``optimizer``: the optimizer's state_dict, or None when ZeRO (stage 1 and
  up) or DeepSpeed's bf16 optimizer keeps it in files of its own, written by the same call:
- ``[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt``, one per data-parallel rank:
  ``optimizer_state_dict``, whose ``base_optimizer_state`` (ZeRO 1 and 2, bf16) or
  ``optimizer_state_dict`` (ZeRO-3) is the torch optimizer's state_dict of that rank's flat
  partitions.

So the model-states file alone is a training checkpoint whose optimizer lies beside it: judged
as one with its optimizer when the config says the optimizer files are written, and (reading
files) when they are there."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

MODEL_STATES = "mp_rank_*_model_states.pt"
OPTIM_STATES = "*zero_pp_rank_*_optim_states.pt"


def is_model_states(obj: Mapping[object, object]) -> bool:
    return "ds_version" in obj and "module" in obj


def is_optim_states(obj: Mapping[object, object]) -> bool:
    return "ds_version" in obj and isinstance(obj.get("optimizer_state_dict"), Mapping)


def optimizer_apart(obj: Mapping[object, object]) -> str:
    """Why the optimizer of a model-states dict is saved in DeepSpeed's own files ("ZeRO stage
    1", "bf16"), or "" when it is not (it is in the dict, or there is none)."""
    config = obj.get("ds_config")
    if obj.get("optimizer") is not None or not isinstance(config, Mapping):
        return ""
    zero = config.get("zero_optimization")
    stage = zero.get("stage", 0) if isinstance(zero, Mapping) else 0
    if isinstance(stage, int) and stage >= 1:
        return f"ZeRO stage {stage}"
    bf16 = config.get("bf16") or config.get("bfloat16")
    return "bf16" if isinstance(bf16, Mapping) and bf16.get("enabled") is True else ""


def base_optimizer(obj: Mapping[object, object]) -> Mapping[str, object] | None:
    """The torch optimizer's state_dict inside an optim-states dict, if it is one."""
    inner = obj.get("optimizer_state_dict")
    if not isinstance(inner, Mapping):
        return None
    for key in ("base_optimizer_state", "optimizer_state_dict"):
        sd = inner.get(key)
        if isinstance(sd, Mapping) and "state" in sd and isinstance(sd.get("param_groups"), list):
            return sd
    return None


def optimizer_files(folder: Path) -> list[Path]:
    """The ZeRO optimizer files beside a model-states file, rank 0's first."""
    return sorted(folder.glob(OPTIM_STATES), key=lambda p: (len(p.name), p.name))


def model_states_file(folder: Path) -> Path | None:
    """A DeepSpeed checkpoint folder's model-states file (model-parallel rank 0's)."""
    return next(iter(sorted(folder.glob(MODEL_STATES))), None)
