"""Regenerate fixtures with the real libraries and read them back. Skipped where a library is
not installed, and run only with TRAINDOC_SLOW=1: importing torch and training with Lightning
and transformers take 10-60 s (the committed fixtures cover the formats otherwise, and
test_readers.py checks the TensorBoard ones against TensorBoard's own reader)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from traindoc.sources import logs

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
slow = pytest.mark.skipif(not os.environ.get("TRAINDOC_SLOW"), reason="set TRAINDOC_SLOW=1 (10-60 s)")


def make_fixtures():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_fixtures", FIX / "make_fixtures.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_fixtures", mod)
    spec.loader.exec_module(mod)
    return mod


@slow
def test_summarywriter_fixtures_read_back(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    pytest.importorskip("torch.utils.tensorboard")
    make_fixtures().tensorboard_files(tmp_path)
    healthy = logs.load([tmp_path / "tensorboard" / "healthy"])
    assert {"loss", "lr", "grad_norm", "val_loss", "val_acc", "throughput"} <= set(healthy.signals())
    assert len(healthy.table.series["train/loss"]) == 300
    resumed = logs.load([tmp_path / "tensorboard" / "resumed"])
    assert resumed.table.series["loss"].steps == list(range(200))


@slow
def test_lightning_csvlogger(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    make_fixtures().lightning_csv(tmp_path)
    log = logs.load([tmp_path / "lightning" / "version_0"])
    assert log.table.format == "lightning-csv"
    assert {"loss", "lr", "val_loss", "val_acc", "train_acc"} <= set(log.signals())


@slow
def test_transformers_trainer_state(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    make_fixtures().hf_trainer_state(tmp_path)
    log = logs.load([tmp_path / "hf" / "healthy"])
    assert {"loss", "lr", "grad_norm", "val_loss", "val_acc"} <= set(log.signals())
    hidden = logs.load([tmp_path / "hf" / "nan_hidden"])
    norms = hidden.table.series["grad_norm"].values
    assert any(v != v for v in norms)  # the NaN the filter hides from the loss
