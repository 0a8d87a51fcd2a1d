"""Detector state survives a resume: ``Engine.state_dict``/``load_state_dict`` through the
Lightning callback's state in a checkpoint that loads with ``weights_only=True``.

The case needs history across the split: clipping-every-step judges at 30 clip calls, and each
half of a 40-step fit clips 20 times. One uninterrupted fit finds it; a fit stopped at step 20
(checkpoint written during training by ModelCheckpoint) and resumed finds the same thing with
the same evidence; the same resume without the engine's state does not. The resumed fit's
steps go on from the restored global step. (Each detector's state round-trip, and the same
comparison on many recorded streams split at several points: tests/test_resume_detectors.py.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

import traindoc
from traindoc.engine import Engine

pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                                reason="lightning is not installed (pip install -e '.[dev]')")

ZOO = Path(__file__).resolve().parents[2] / "zoo"


def fit(tmp: Path, max_steps: int, resume: Path | None = None, restore: bool = True,
        nan_from: int | None = None) -> traindoc.lightning.TraindocCallback:
    """A 20-batch-per-epoch regression fit with clipping; ``nan_from``: the loss is NaN from
    that global step on."""
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
            loss = F.mse_loss(self.net(x), y)
            return loss * float("nan") if nan_from is not None and self.global_step >= nan_from else loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=1e-4)

    L.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(320, 8, generator=g)  # 20 batches: the checkpoint at step 20 ends epoch 0
    y = 100.0 * torch.randn(320, 1, generator=g)  # large targets: the gradient norm is ~100x max_norm
    callback = traindoc.lightning.TraindocCallback()
    if not restore:
        callback.load_state_dict = lambda state_dict: None  # type: ignore[method-assign]
    trainer = L.Trainer(
        max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, gradient_clip_val=1.0, default_root_dir=str(tmp),
        callbacks=[callback, ModelCheckpoint(dirpath=str(tmp), every_n_train_steps=20, save_top_k=-1)],
    )
    trainer.fit(Regressor(), DataLoader(TensorDataset(x, y), batch_size=16), ckpt_path=resume,
                weights_only=True)
    return callback


def test_a_resumed_fit_finds_what_an_uninterrupted_one_finds(tmp_path: Path) -> None:
    whole = {f.id: f for f in fit(tmp_path / "whole", 40).findings}
    assert "clipping-every-step" in whole
    assert whole["clipping-every-step"].evidence["calls"] == 40

    fit(tmp_path / "split", 20)
    ckpt = tmp_path / "split" / "epoch=0-step=20.ckpt"
    state = torch.load(ckpt, weights_only=True)["callbacks"]["TraindocCallback"]["engine"]
    assert state["detectors"]["clipping-every-step"]
    resumed = {f.id: f for f in fit(tmp_path / "split", 40, resume=ckpt).findings}
    assert resumed.keys() == whole.keys()
    assert resumed["clipping-every-step"].step == whole["clipping-every-step"].step == 0
    assert resumed["clipping-every-step"].evidence == whole["clipping-every-step"].evidence

    fresh = {f.id for f in fit(tmp_path / "split", 40, resume=ckpt, restore=False).findings}
    assert "clipping-every-step" not in fresh  # 20 calls after the resume: the history mattered


def test_a_resumed_fit_quotes_the_users_step_numbers(tmp_path: Path) -> None:
    """Steps go on from the restored global step: a NaN loss from step 30 is found at step 30
    in a fit resumed at step 20, as in one uninterrupted fit (the resumed process's own count
    would say 10), and the run's step count is the fit's."""
    whole = fit(tmp_path / "whole", 40, nan_from=30)
    fit(tmp_path / "split", 20)
    resumed = fit(tmp_path / "split", 40, resume=tmp_path / "split" / "epoch=0-step=20.ckpt", nan_from=30)
    steps = {f.id: f.step for f in resumed.findings}
    assert steps["nonfinite"] == {f.id: f.step for f in whole.findings}["nonfinite"] == 30
    assert resumed.report is not None and whole.report is not None
    assert resumed.report.run["steps"] == whole.report.run["steps"] == 40


def test_a_state_that_does_not_fit_leaves_the_detector_fresh() -> None:
    from traindoc.detectors.clipping_every_step import ClippingEveryStep

    det = ClippingEveryStep()
    before = dict(vars(det))
    Engine([det]).load_state_dict({"version": 1, "detectors": {"clipping-every-step": {"ratios": "?"}}})
    assert vars(det).keys() == before.keys() and det._ratios is before["_ratios"]


def hf_train(out: Path, max_steps: int, resume: str | None = None, nan_from: int | None = None,
             save_steps: int = 5, max_grad_norm: float = 1.0) -> Any:
    """A tiny regression through HF's Trainer (checkpoints every ``save_steps`` steps);
    ``nan_from``: the loss is NaN from that global step on."""
    import torch.nn as nn
    from transformers import Trainer, TrainerCallback, TrainingArguments

    import traindoc.hf

    class Regressor(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
            self.poisoned = False

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            loss = nn.functional.mse_loss(self.net(x), labels)
            return {"loss": loss * float("nan") if self.poisoned else loss}

    class Poison(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            model.poisoned = nan_from is not None and state.global_step >= nan_from

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = [{"x": x, "labels": y} for x, y in zip(torch.randn(160, 8, generator=g), torch.randn(160, 1, generator=g))]
    callback = traindoc.hf.TraindocCallback()
    args = TrainingArguments(output_dir=str(out), max_steps=max_steps, per_device_train_batch_size=8,
                             save_steps=save_steps, logging_steps=5, report_to="none", use_cpu=True,
                             learning_rate=1e-2, seed=0, max_grad_norm=max_grad_norm)
    Trainer(model=Regressor(), args=args, train_dataset=data, callbacks=[Poison(), callback]).train(
        resume_from_checkpoint=resume)
    return callback


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_a_resumed_hf_training_quotes_the_users_step_numbers(tmp_path: Path) -> None:
    """HF Trainer resumed from its checkpoint at step 5: a NaN loss from step 7 is found at
    step 7, as in one uninterrupted training (the resumed process's own count would say 2)."""
    whole = hf_train(tmp_path / "whole", 10, nan_from=7)
    hf_train(tmp_path / "split", 5)
    resumed = hf_train(tmp_path / "split", 10, resume=str(tmp_path / "split" / "checkpoint-5"), nan_from=7)
    assert {f.id: f.step for f in resumed.findings}["nonfinite"] == \
        {f.id: f.step for f in whole.findings}["nonfinite"] == 7
    assert resumed.report.run["steps"] == whole.report.run["steps"] == 10


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_a_resumed_hf_training_goes_on_from_the_detectors_history(tmp_path: Path) -> None:
    """Each checkpoint folder gets traindoc_state.json (on_save); resumed from checkpoint-20, a
    40-step training clipped on every step finds clipping-every-step as one uninterrupted
    training does (30 calls needed), with the same evidence. Without the file, the 20 calls
    after the resume are too few."""
    tight = 1e-4
    whole = {f.id: f for f in hf_train(tmp_path / "whole", 40, save_steps=20, max_grad_norm=tight).findings}
    assert whole["clipping-every-step"].evidence["calls"] == 40

    hf_train(tmp_path / "split", 20, save_steps=20, max_grad_norm=tight)
    saved = tmp_path / "split" / "checkpoint-20" / "traindoc_state.json"
    assert saved.is_file()
    resumed = {f.id: f for f in hf_train(tmp_path / "split", 40, resume=str(saved.parent), save_steps=20,
                                          max_grad_norm=tight).findings}
    assert resumed.keys() == whole.keys()
    got, want = resumed["clipping-every-step"].evidence, whole["clipping-every-step"].evidence
    assert got["calls"] == want["calls"] == 40 and got["clip_rate"] == want["clip_rate"]
    # HF's resume is not bit-exact (its data order and RNG restore): the same norms to 0.5%
    assert got["median_ratio"] == pytest.approx(want["median_ratio"], rel=5e-3)

    saved.unlink()
    fresh = {f.id for f in hf_train(tmp_path / "split", 40, resume=str(saved.parent), save_steps=20,
                                    max_grad_norm=tight).findings}
    assert "clipping-every-step" not in fresh


def test_plain_json_round_trips_an_engine_state() -> None:
    from traindoc.integrations import plain_json

    state = {"version": 1, "detectors": {"x": {(0, 1): [1.5, float("inf")], "t": (1, "a", None)}},
             "__tuple__": {"k": True}}
    back = plain_json.loads(plain_json.dumps(state))
    assert back == state and isinstance(back["detectors"]["x"]["t"], tuple)
    nan = plain_json.loads(plain_json.dumps([float("nan")]))[0]
    assert nan != nan

