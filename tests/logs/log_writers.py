"""One run's metrics written in each log format traindoc reads, with each format's own naming.

A run is ``{signal: [(step, value), ...]}`` in traindoc's signal names; each writer renames the
signals the way that format's users name them (seed 000's ``Train_Loss``, Lightning's
``train_loss_step``, Hugging Face's ``eval_accuracy``, TensorBoard's ``train/loss``) and lays
the points out as that tool does (sparse Lightning rows, Hugging Face's 1-based ``step``, one
TensorBoard record per point, written by TensorBoard's own EventFileWriter). The readers must
map every name back: the tests compare what the detectors say across formats.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

Run = dict[str, list[tuple[int, float]]]

FORMATS = ("csv", "lightning", "tensorboard", "trainer_state", "jsonl")
# Signals logged with the training step; the others are evaluations.
TRAIN = ("loss", "lr", "grad_norm", "train_acc", "expert_gini", "expert_entropy", "metric.train_mae",
         "metric.train_collapse_level")

NAMES: dict[str, dict[str, str]] = {
    "csv": {"loss": "Train_Loss", "lr": "LR", "grad_norm": "Grad_Norm", "train_acc": "Train_Acc",
            "expert_gini": "Expert_Gini", "expert_entropy": "Expert_Entropy", "metric.train_mae": "Train_MAE", "metric.train_collapse_level": "Train_Collapse_Level",
            "val_loss": "Val_Loss", "val_acc": "Val_Acc", "val_f1": "Val_F1"},
    "lightning": {"loss": "train_loss_step", "lr": "lr-AdamW", "grad_norm": "grad_norm",
                  "train_acc": "train_acc_step", "expert_gini": "router_gini", "expert_entropy": "router_entropy",
                  "metric.train_mae": "train_mae", "metric.train_collapse_level": "train_collapse_level",
                  "val_loss": "val_loss", "val_acc": "val_acc", "val_f1": "val_f1"},
    "tensorboard": {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
                    "train_acc": "train/acc", "expert_gini": "moe/load_gini", "expert_entropy": "moe/router_entropy",
                    "metric.train_mae": "train/mae", "metric.train_collapse_level": "train/collapse_level",
                    "val_loss": "val/loss", "val_acc": "val/acc", "val_f1": "val/f1"},
    "trainer_state": {"loss": "loss", "lr": "learning_rate", "grad_norm": "grad_norm", "train_acc": "train_accuracy",
                      "expert_gini": "expert_gini", "expert_entropy": "expert_entropy", "metric.train_mae": "train_mae",
                      "metric.train_collapse_level": "train_collapse_level", "val_loss": "eval_loss", "val_acc": "eval_accuracy", "val_f1": "eval_f1"},
    "jsonl": {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm", "train_acc": "train/acc",
              "expert_gini": "moe/gini", "expert_entropy": "moe/entropy", "metric.train_mae": "train/mae",
              "metric.train_collapse_level": "train/collapse_level", "val_loss": "val/loss", "val_acc": "val/accuracy", "val_f1": "val/f1"},
}


def write(fmt: str, run: Run, folder: Path) -> Path:
    """Write ``run`` into ``folder`` as ``fmt``; returns the path to pass to ``traindoc logs``."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = _rows(run, NAMES[fmt])
    if fmt == "csv":
        return _csv(folder / "training_log.csv", "Epoch", [(s, {**t, **v}) for s, t, v in rows])
    if fmt == "lightning":
        return _lightning(folder / "lightning_logs" / "version_0", rows)
    if fmt == "tensorboard":
        return _tensorboard(folder / "runs" / "exp1", run, NAMES[fmt])
    if fmt == "trainer_state":
        return _trainer_state(folder / "out" / "checkpoint-300", rows)
    if fmt == "jsonl":
        return _jsonl(folder / "metrics.jsonl", rows)
    raise ValueError(fmt)


def _rows(run: Run, names: dict[str, str]) -> list[tuple[int, dict[str, float], dict[str, float]]]:
    """Per step: the training values and the evaluation values logged at it."""
    by_step: dict[int, tuple[dict[str, float], dict[str, float]]] = {}
    for signal, points in run.items():
        for step, value in points:
            train, val = by_step.setdefault(step, ({}, {}))
            (train if signal in TRAIN else val)[names[signal]] = value
    return [(s, *by_step[s]) for s in sorted(by_step)]


def _cell(v: float) -> str:
    return repr(float(v)) if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))


def _csv(path: Path, x: str, rows: list[tuple[int, dict[str, float]]], extra: tuple[str, ...] = ()) -> Path:
    cols = list(dict.fromkeys(k for _, r in rows for k in r))
    lines = [",".join((x, *extra, *cols))]
    for step, r in rows:
        lead = [str(step)] + [str(r.get(e, "")) for e in extra]
        lines.append(",".join(lead + [_cell(r[c]) if c in r else "" for c in cols]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _lightning(folder: Path, rows: list[tuple[int, dict[str, float], dict[str, float]]]) -> Path:
    """CSVLogger: one row per log call, train and validation metrics on rows of their own."""
    flat = []
    for step, train, val in rows:
        for part in (train, val):
            if part:
                flat.append((step, {"epoch": float(step // 50), **part}))
    cols = list(dict.fromkeys(k for _, r in flat for k in r if k != "epoch"))
    lines = [",".join(["epoch", "step", *cols])]
    for step, r in flat:
        lines.append(",".join([str(int(r["epoch"])), str(step)] + [_cell(r[c]) if c in r else "" for c in cols]))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
    return folder


def _tensorboard(folder: Path, run: Run, names: dict[str, str]) -> Path:
    """SummaryWriter.add_scalar's records, written by TensorBoard's own event file writer."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    points = sorted((step, names[sig], v) for sig, pts in run.items() for step, v in pts)
    for step, tag, value in points:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary))
    writer.close()
    return folder


def _trainer_state(folder: Path, rows: list[tuple[int, dict[str, float], dict[str, float]]]) -> Path:
    """log_history: a training entry and an evaluation entry per logged step; HF's ``step`` is
    the number of optimizer steps done (1 after the first)."""
    history: list[dict[str, object]] = []
    for step, train, val in rows:
        for part in (train, val):
            if part:
                history.append({**part, "epoch": round(step / 100, 2), "step": step + 1})
    history.append({"train_runtime": 12.5, "train_loss": 1.0, "total_flos": 1e12, "step": rows[-1][0] + 1})
    folder.mkdir(parents=True, exist_ok=True)
    state = {"global_step": rows[-1][0] + 1, "log_history": history, "best_metric": None}
    (folder / "trainer_state.json").write_text(json.dumps(state, indent=2))  # NaN stays NaN, as HF's
    return folder.parent


def _jsonl(path: Path, rows: list[tuple[int, dict[str, float], dict[str, float]]]) -> Path:
    """One object per log call, nested by split ({"train": {"loss": ...}} -> train/loss)."""
    lines = []
    for step, train, val in rows:
        for part in (train, val):
            if not part:
                continue
            nested: dict[str, object] = {"step": step}
            for key, value in part.items():
                group, _, leaf = key.partition("/")
                sub = nested.setdefault(group, {})
                assert isinstance(sub, dict)
                sub[leaf] = value
            lines.append(json.dumps(nested))
    path.write_text("\n".join(lines) + "\n")
    return path
