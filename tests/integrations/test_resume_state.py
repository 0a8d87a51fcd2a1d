"""Detector state survives a resume: ``Engine.state_dict``/``load_state_dict`` through the
Lightning callback's state in a checkpoint that loads with ``weights_only=True``.

The case needs history across the split: clipping-every-step judges at 30 clip calls, and each
half of a 40-step fit clips 20 times. One uninterrupted fit finds it; a fit stopped at step 20
(checkpoint written during training by ModelCheckpoint) and resumed finds the same thing with
the same evidence; the same resume without the engine's state does not."""

from __future__ import annotations

import importlib.util
import io
import json
import runpy
from pathlib import Path
from typing import Any

import pytest
import torch

import traindoc
from traindoc.detectors import DETECTORS
from traindoc.engine import Engine

pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                                reason="lightning is not installed (pip install -e '.[dev]')")

ZOO = Path(__file__).resolve().parents[2] / "zoo"


def fit(tmp: Path, max_steps: int, resume: Path | None = None, restore: bool = True) -> list[Any]:
    import lightning as L
    import torch.nn as nn
    import torch.nn.functional as F
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    import traindoc.lightning

    class Regressor(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return F.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=1e-4)

    L.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(320, 8, generator=g)  # 20 batches: the checkpoint at step 20 ends epoch 0
    y = 100.0 * torch.randn(320, 1, generator=g)  # large targets: the gradient norm is ~100x max_norm
    callback = traindoc.lightning.TraindocCallback()
    if not restore:
        callback.load_state_dict = lambda state: None  # type: ignore[method-assign]
    trainer = L.Trainer(
        max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, gradient_clip_val=1.0, default_root_dir=str(tmp),
        callbacks=[callback, ModelCheckpoint(dirpath=str(tmp), every_n_train_steps=20, save_top_k=-1)],
    )
    trainer.fit(Regressor(), DataLoader(TensorDataset(x, y), batch_size=16), ckpt_path=resume,
                weights_only=True)
    return callback.findings


def test_a_resumed_fit_finds_what_an_uninterrupted_one_finds(tmp_path: Path) -> None:
    whole = {f.id: f for f in fit(tmp_path / "whole", 40)}
    assert "clipping-every-step" in whole
    assert whole["clipping-every-step"].evidence["calls"] == 40

    fit(tmp_path / "split", 20)
    ckpt = tmp_path / "split" / "epoch=0-step=20.ckpt"
    state = torch.load(ckpt, weights_only=True)["callbacks"]["TraindocCallback"]["engine"]
    assert state["detectors"]["clipping-every-step"]
    resumed = {f.id: f for f in fit(tmp_path / "split", 40, resume=ckpt)}
    assert resumed.keys() == whole.keys()
    assert resumed["clipping-every-step"].step == whole["clipping-every-step"].step == 0
    assert resumed["clipping-every-step"].evidence == whole["clipping-every-step"].evidence

    fresh = {f.id for f in fit(tmp_path / "split", 40, resume=ckpt, restore=False)}
    assert "clipping-every-step" not in fresh  # 20 calls after the resume: the history mattered


STATEFUL = [cls for cls in DETECTORS if hasattr(cls, "state_dict")]


@pytest.mark.parametrize("cls", STATEFUL, ids=[c.id for c in STATEFUL])
def test_each_stateful_detector_round_trips_through_weights_only(cls: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """On each of its examples that must fire (a zoo case, run live), the detector's state in
    the engine's state, saved with torch.save and loaded with weights_only=True into a fresh
    engine, gives the same state back and the same findings."""
    cases = [e.source for e in cls.examples if e.source.startswith("zoo/") and e.fires_at is not None]
    assert cases, f"{cls.id}: no zoo example to take its state from"
    script = str(ZOO.parent / cases[0])
    monkeypatch.setattr("sys.argv", [script])
    with traindoc.watch(announce=False, select=[cls.id]) as doc:
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit:
            pass
        engine: Engine = doc.session.engine
        state = engine.state_dict()
    assert cls.id in state["detectors"], "its state_dict() must return plain data"
    buf = io.BytesIO()
    torch.save({"traindoc": state}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)["traindoc"]
    again = Engine([cls()])
    again.load_state_dict(loaded)
    assert json.dumps(again.state_dict()) == json.dumps(state)
    assert [f.to_dict() for f in again.findings] == state["findings"] != []


def test_a_state_that_does_not_fit_leaves_the_detector_fresh() -> None:
    from traindoc.detectors.clipping_every_step import ClippingEveryStep

    det = ClippingEveryStep()
    before = dict(vars(det))
    Engine([det]).load_state_dict({"version": 1, "detectors": {"clipping-every-step": {"ratios": "?"}}})
    assert vars(det).keys() == before.keys() and det._ratios is before["_ratios"]
