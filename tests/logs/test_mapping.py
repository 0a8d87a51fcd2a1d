"""Column names -> signals: every row of the table in docs/logs.md, conflicts, --map."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from traindoc.errors import UsageError
from traindoc.sources.logs import mapping

DOC = Path(__file__).resolve().parents[2] / "docs" / "logs.md"

# (column as logged, signal; None = unmapped, "-" = bookkeeping, skipped quietly)
ROWS = [
    ("loss", "loss"), ("Train_Loss", "loss"), ("train/loss", "loss"), ("Loss/train", "loss"),
    ("trainLoss", "loss"), ("train_loss_step", "loss"),
    ("val_loss", "val_loss"), ("eval_loss", "val_loss"), ("Loss/val", "val_loss"), ("valid/loss", "val_loss"),
    ("lr", "lr"), ("LR", "lr"), ("learning_rate", "lr"), ("lr-AdamW", "lr"), ("train/lr", "lr"),
    ("grad_norm", "grad_norm"), ("Grad Norm", "grad_norm"), ("train/grad_norm", "grad_norm"),
    ("total_norm", "grad_norm"), ("gnorm", "grad_norm"),
    ("train_acc", "train_acc"), ("Train_Acc", "train_acc"), ("accuracy", "train_acc"),
    ("val_acc", "val_acc"), ("eval_accuracy", "val_acc"), ("Accuracy/val", "val_acc"), ("valAcc", "val_acc"),
    ("Train_F1", "train_f1"), ("Val_F1", "val_f1"), ("eval_f1", "val_f1"),
    ("Expert_Gini", "expert_gini"), ("router_gini", "expert_gini"),
    ("Expert_Entropy", "expert_entropy"), ("router_entropy", "expert_entropy"),
    ("expert_3_load", "expert_load.3"), ("moe/frac_e3", "expert_load.3"), ("load_e3", "expert_load.3"),
    ("num_classes", "val_classes"),
    ("throughput", "throughput"), ("tokens_per_sec", "throughput"), ("train_samples_per_second", "throughput"),
    ("kl_loss", "loss_term.kl"), ("loss/recon", "loss_term.recon"), ("Train_Loss_DAG", "loss_term.dag"),
    ("Train_MAE", "metric.train_mae"), ("Val_SHD", "metric.val_shd"), ("eval_precision", "metric.eval_precision"),
    ("test_acc", "metric.test_acc"), ("val_kl", "metric.val_kl"), ("top5", "metric.top5"),
    ("epoch", "-"), ("step", "-"), ("eval_runtime", "-"), ("total_flos", "-"), ("_timestamp", "-"),
    ("eval_samples_per_second", "-"), ("num_input_tokens_seen", "-"),
    ("train/loss__MIN", "metric.train_loss_min"), ("lr_max", "metric.lr_max"),
    ("Level", None), ("Train_H", None), ("entropy", None), ("lr-AdamW-momentum", None), ("foo", None),
]


@pytest.mark.parametrize("column,signal", ROWS, ids=[r[0] for r in ROWS])
def test_heuristic(column: str, signal: str | None) -> None:
    g = mapping.guess(column)
    if signal == "-":
        assert g.bookkeeping and g.signal is None
    else:
        assert g.signal == signal and not g.bookkeeping


def test_docs_table_lists_the_same_rows() -> None:
    """docs/logs.md shows each example column with its signal: the table and the code agree."""
    text = DOC.read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| `([^`]+)` \| ([^|]+?) \|", text, re.M))
    for column, signal in ROWS:
        assert column in table, f"docs/logs.md does not list {column!r}"
        shown = table[column].strip().strip("`")
        want = {"-": "skipped", None: "unmapped"}.get(signal, signal)
        assert shown == want, f"{column}: docs say {shown!r}, code says {want!r}"


def test_seed000_columns() -> None:
    cols = ["Epoch", "Level", "LR", "Train_Loss", "Train_Delta", "Train_DAG", "Train_H", "Train_MAE",
            "Train_SHD", "Train_F1", "Val_MAE", "Val_SHD", "Val_F1", "Expert_Entropy", "Expert_Gini"]
    m = mapping.resolve(cols)
    assert m.signal_of["Train_Loss"] == "loss" and m.signal_of["LR"] == "lr"
    # Siblings of Train_Loss that name a word are its terms; a one-letter name is not guessed.
    assert m.signal_of["Train_Delta"] == "loss_term.delta" and m.signal_of["Train_DAG"] == "loss_term.dag"
    assert m.unmapped == ["Level", "Train_H"]
    assert m.ignored == ["Epoch"]
    assert m.signal_of["Val_MAE"] == "metric.val_mae"


def test_one_column_per_signal_best_ranked_wins() -> None:
    m = mapping.resolve(["train_loss_epoch", "train_loss_step", "lr-AdamW/pg2", "lr-AdamW/pg1",
                         "grad_norm_clipped", "grad_norm_pre_clip"])
    assert m.column_of("loss") == "train_loss_step"
    assert m.signal_of["train_loss_epoch"] == "metric.train_loss_epoch"
    assert m.column_of("lr") == "lr-AdamW/pg1"
    assert m.column_of("grad_norm") == "grad_norm_pre_clip"
    assert any("train_loss_epoch" in n for n in m.notes)


def test_a_mean_ranks_after_the_plain_column() -> None:
    m = mapping.resolve(["train_loss_avg", "train/loss", "train/loss__MAX"])
    assert m.column_of("loss") == "train/loss"
    assert m.signal_of["train_loss_avg"] == "metric.train_loss_avg"
    assert mapping.resolve(["running_loss"]).column_of("loss") == "running_loss"


def test_metric_names_stay_unique() -> None:
    m = mapping.resolve(["Train MAE", "Train_MAE"])
    assert sorted(m.signal_of.values()) == ["metric.train_mae", "metric.train_mae_2"]


def test_overrides_win_and_demote_the_guess() -> None:
    ov = mapping.parse_overrides(["loss=Train_Delta,lr=LR", "loss_term.h=Train_H", "ignore=Level"])
    m = mapping.resolve(["Train_Loss", "Train_Delta", "Train_H", "LR", "Level"], ov)
    assert m.signal_of["Train_Delta"] == "loss"
    assert m.signal_of["Train_Loss"] == "metric.train_loss"
    assert m.signal_of["Train_H"] == "loss_term.h"
    assert "Level" in m.ignored and not m.unmapped


@pytest.mark.parametrize("text,message", [
    ("loss", "expected signal=column"),
    ("=Train_Loss", "expected signal=column"),
    ("los=Train_Loss", "Did you mean loss"),
    ("metric.=X", "unknown signal"),
    ("loss=a,loss=b", "maps loss twice"),
])
def test_bad_overrides(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        mapping.parse_overrides([text])


def test_words() -> None:
    assert mapping.words("lr-AdamW/pg1") == ["lr", "adam", "w", "pg1"]
    assert mapping.words("learning_rate") == ["learningrate"]
    assert mapping.words("valF1Score") == ["val", "f1score"]
    assert mapping.words("") == []
