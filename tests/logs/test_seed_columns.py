"""Logs as the seed post-mortems wrote them: seed 000's own training_log.csv columns with expert
collapse and an F1 that drops to exactly 0, and seed 004's accuracies in percent (0.10 meaning
0.1%, chance for 1000 classes) next to the same run logged in fractions. The header says how
each column was mapped and in which unit it was read."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from traindoc.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "seeds"
SEED000 = ["Epoch", "Level", "LR", "Train_Loss", "Train_Delta", "Train_DAG", "Train_H", "Train_MAE",
           "Train_SHD", "Train_F1", "Val_MAE", "Val_SHD", "Val_F1", "Expert_Entropy", "Expert_Gini"]


def _logs(capsys: pytest.CaptureFixture[str], path: Path, *options: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    out = path.with_suffix(".json")
    assert main(["logs", str(path), "--json", str(out), *options]) in (0, 3)
    return json.loads(out.read_text()), capsys.readouterr().err


def _seed000(path: Path, collapse: bool, f1_drop: bool) -> Path:
    """seed 000's healthy log (60 epochs), with the router collapsing from epoch 30 (Gini up to
    0.8, entropy down to 0.6 nats) and/or Val_F1 exactly 0 from epoch 40."""
    with open(FIX / "seed000_healthy.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == SEED000
    for r in rows:
        e = int(r["Epoch"])
        if collapse and e >= 30:
            r["Expert_Gini"] = f"{min(0.8, float(r['Expert_Gini']) + 0.03 * (e - 29)):.6g}"
            r["Expert_Entropy"] = f"{max(0.6, float(r['Expert_Entropy']) - 0.08 * (e - 29)):.6g}"
        if f1_drop and e >= 40:
            r["Val_F1"] = "0"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=SEED000)
        w.writeheader()
        w.writerows(rows)
    return path


def test_seed000_columns_are_all_accounted_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, err = _logs(capsys, _seed000(tmp_path / "training_log.csv", False, False))
    logs = report["run"]["logs"]
    mapping = logs["mapping"]
    assert {mapping[s] for s in ("lr", "loss", "train_f1", "val_f1", "expert_entropy", "expert_gini")} == {
        "LR", "Train_Loss", "Train_F1", "Val_F1", "Expert_Entropy", "Expert_Gini"}
    assert {mapping["loss_term.delta"], mapping["loss_term.dag"]} == {"Train_Delta", "Train_DAG"}
    assert {"Train_MAE", "Train_SHD", "Val_MAE", "Val_SHD"} <= set(mapping.values())
    assert logs["unmapped"] == ["Level", "Train_H"] and logs["x_column"] == "Epoch"
    assert "mapped (by name, case and separators ignored): lr=LR, loss=Train_Loss" in err
    assert report["findings"] == []


def test_seed000_expert_collapse_in_gini_and_entropy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _seed000(tmp_path / "training_log.csv", True, False)
    report, _ = _logs(capsys, path)
    (f,) = [f for f in report["findings"] if f["id"] == "expert-collapse"]
    with open(path, newline="") as fh:
        first_entropy = float(next(csv.DictReader(fh))["Expert_Entropy"])
    assert f["evidence"]["gini"] >= 0.6 and f["evidence"]["entropy"] < 0.7 * first_entropy
    assert "router entropy" in f["message"]
    assert {x["id"] for x in report["findings"]} == {"expert-collapse"}


def test_seed000_f1_exactly_zero_after_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, _ = _logs(capsys, _seed000(tmp_path / "training_log.csv", False, True))
    (f,) = report["findings"]
    assert f["id"] == "degenerate-threshold" and f["step"] == 40 and "val_f1" in f["message"]


def _seed004(path: Path, scale: float, val_first: bool, chance: bool) -> Path:
    """seed 004's log (20 epochs, 1000 classes) in percent (scale 100) or fractions (1): the
    validation accuracy of the EMA model stuck at chance, or tracking training."""
    with open(FIX / "seed004_onecycle_ema.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    cols = ["Epoch", "LR", "Train_Loss", "Val_Acc", "Train_Acc", "Val_Loss"] if val_first else list(rows[0])
    for r in rows:
        train = float(r["Train_Acc"]) / 100
        val = 0.001 if chance else max(0.0, train - 0.02)
        r["Train_Acc"], r["Val_Acc"] = f"{train * scale:.6g}", f"{val * scale:.6g}"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.mark.parametrize("val_first", [False, True], ids=["train-column-first", "val-column-first"])
@pytest.mark.parametrize("scale,unit", [(100.0, "percent"), (1.0, "fraction")])
def test_seed004_accuracy_units(tmp_path: Path, capsys: pytest.CaptureFixture[str], scale: float, unit: str,
                                val_first: bool) -> None:
    report, err = _logs(capsys, _seed004(tmp_path / "log.csv", scale, val_first, chance=True))
    assert report["run"]["logs"]["units"] == {"Train_Acc": unit, "Val_Acc": unit}
    assert f"val_acc=Val_Acc ({unit})" in err and f"Val_Acc in {unit}" in err
    (f,) = [f for f in report["findings"] if f["id"] == "val-at-chance"]
    assert f["evidence"]["classes"] == 1000 and f["evidence"]["percent"] is (unit == "percent")
    assert "chance 1/1000 = " + ("0.1%" if unit == "percent" else "0.001") in f["message"]
    if unit == "percent":  # told from Train_Acc: Val_Acc's own values never exceed 1
        assert "Val_Acc in percent (up to 0.1, read as Train_Acc, which reaches 69.18)" in err


@pytest.mark.parametrize("scale", [100.0, 1.0])
def test_seed004_fixed_run_is_quiet_in_either_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  scale: float) -> None:
    report, _ = _logs(capsys, _seed004(tmp_path / "log.csv", scale, True, chance=False))
    assert "val-at-chance" not in {f["id"] for f in report["findings"]}


def test_names_map_whatever_their_case_and_separators(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [(e, 2.0 * math.exp(-e / 5), 30.0 + 2 * e, 0.1) for e in range(20)]
    for header in ("EPOCH,TRAIN_LOSS,TRAIN_ACC,VAL_ACC", "epoch;train-loss;train acc;val.acc",
                   "Epoch\ttrainLoss\tTrainAcc\tvalAcc"):
        delim = ";" if ";" in header else "\t" if "\t" in header else ","
        path = tmp_path / "log.csv"
        path.write_text(header + "\n" + "".join(delim.join(map(str, r)) + "\n" for r in rows))
        report, err = _logs(capsys, path)
        logs = report["run"]["logs"]
        assert sorted(logs["mapping"]) == ["loss", "train_acc", "val_acc"], (header, logs)
        assert set(logs["units"].values()) == {"percent"}
        assert {f["id"] for f in report["findings"]} == {"val-at-chance"}, header


def test_explicit_map_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "log.csv"
    path.write_text("step,objective,top1\n" + "".join(f"{s},{2 - s / 50},{s / 100}\n" for s in range(30)))
    report, err = _logs(capsys, path, "--map", "loss=objective")
    assert "loss=objective (--map)" in err and "by --map" in err
    assert report["run"]["logs"]["explicit"] == ["objective"]
