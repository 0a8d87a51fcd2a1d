"""Hugging Face ``trainer_state.json`` (written next to every Trainer checkpoint).

Its ``log_history`` is a list of entries: training logs every ``logging_steps``
(``{"loss", "grad_norm", "learning_rate", "epoch", "step"}``), evaluations
(``{"eval_loss", "eval_accuracy", "eval_runtime", ..., "epoch", "step"}``) and one final
summary (``{"train_runtime", "train_loss", ...}``) whose ``train_loss`` is the mean over the
whole run, not a point of the curve: it is skipped.

HF's ``step`` is ``state.global_step`` at logging time, the number of optimizer steps done: the
entry at step 10 describes 0-based steps 0..9, so it becomes step 9. Its ``loss`` is the mean
over the steps since the previous log; with ``logging_nan_inf_filter=True`` (the default) a
NaN/Inf step loss is replaced by that mean (see nan-hidden-by-logging).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TypeGuard

from traindoc.errors import UsageError, too_deep
from traindoc.sources.logs._table import Series, Table, number

_SUMMARY_KEYS = {"train_runtime", "total_flos"}


def looks_like(data: object) -> TypeGuard[dict[str, object]]:
    return isinstance(data, dict) and "log_history" in data


def read(path: Path, data: object) -> Table:
    if not looks_like(data):
        raise UsageError(f"{path}: a JSON file without log_history, so not a trainer_state.json; "
                         "pass the trainer_state.json of a checkpoint folder, or a .jsonl log")
    history = data["log_history"]
    if not isinstance(history, list):
        raise UsageError(f"{path}: log_history is not a list; the file is corrupt")
    table = Table(format="trainer_state", files=[str(path)], x="step", x_column="step")
    skipped = 0
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            raise UsageError(f"{path}: log_history[{i}] is not an object; the file is corrupt")
        if _SUMMARY_KEYS & entry.keys():
            skipped += 1
            continue
        step = entry.get("step")
        if isinstance(step, float) and math.isfinite(step):
            step = int(step)
        if not isinstance(step, int) or isinstance(step, bool):
            raise UsageError(f"{path}: log_history[{i}] has no step; the file is corrupt")
        x = max(step - 1, 0)
        for key, value in entry.items():
            if key in ("step", "epoch"):
                continue
            v = number(value)
            if v is None:
                if value is not None and key not in table.non_numeric:
                    table.non_numeric.append(key)
                continue
            s = table.series.get(key)
            if s is None:
                s = table.series[key] = Series()
            s.steps.append(x)
            s.values.append(v)
    if not table.series:
        raise UsageError(f"{path}: log_history holds no logged values (the run logged nothing "
                         "before this checkpoint?); pass a later checkpoint's trainer_state.json")
    if skipped:
        table.notes.append(f"{path.name}: the end-of-training summary (train_loss = mean over the run) is "
                           "not a point of the curve; skipped")
    for key in [k for k in table.non_numeric if k in table.series]:
        table.non_numeric.remove(key)
    return table


def load(path: Path, text: str) -> Table:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); the file is "
                         "truncated or corrupt") from None
    except RecursionError:
        raise too_deep(path, "the file is corrupt; pass the trainer_state.json a Trainer wrote") from None
    return read(path, data)
