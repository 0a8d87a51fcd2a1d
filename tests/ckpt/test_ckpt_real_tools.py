"""The real writers, not our imitation of their layout: Lightning's Trainer.save_checkpoint and
Hugging Face's Trainer. Importing either takes 10-20 s, so these run only with
TRAINDOC_SLOW_TESTS=1 (and when the library is installed); the fast tests use the same layouts
written by ckpt_fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import python, traindoc

slow = pytest.mark.skipif(not os.environ.get("TRAINDOC_SLOW_TESTS"), reason="set TRAINDOC_SLOW_TESTS=1")

LIGHTNING = """
import torch, lightning as L
class M(L.LightningModule):
    def __init__(s):
        super().__init__(); s.l = torch.nn.Linear(4, 2); s.bn = torch.nn.BatchNorm1d(2)
    def training_step(s, b, i): return s.bn(s.l(b[0])).pow(2).mean()
    def configure_optimizers(s):
        o = torch.optim.AdamW(s.parameters(), lr=1e-3)
        return {"optimizer": o, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(o, 1, 0.5), "interval": "step"}}
dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 4)), batch_size=4)
t = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False)
t.fit(M(), dl)
t.save_checkpoint("real.ckpt")
t.save_checkpoint("weights.ckpt", weights_only=True)
"""

HF = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16))
class DS(torch.utils.data.Dataset):
    def __len__(self): return 32
    def __getitem__(self, i):
        x = torch.randint(0, 50, (8,)); return {"input_ids": x, "labels": x}
args = TrainingArguments(output_dir="out", max_steps=4, save_steps=2, per_device_train_batch_size=4,
                         report_to=[], use_cpu=True, learning_rate=5e-4)
Trainer(model=model, args=args, train_dataset=DS()).train()
"""


@slow
def test_real_lightning_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    (tmp_path / "fit.py").write_text(LIGHTNING)
    out = python("fit.py", cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = traindoc("ckpt", "inspect", "real.ckpt", "--expect-lr", "1e-3", "--fail-on", "info", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "lightning, training checkpoint, step 3" in res.stderr and "absent: scaler, rng" in res.stderr
    res = traindoc("ckpt", "inspect", "weights.ckpt", cwd=tmp_path)
    assert res.returncode == 0 and "save_weights_only=True" in res.stderr


@slow
def test_real_hugging_face_trainer_folder(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    (tmp_path / "fit.py").write_text(HF)
    out = python("fit.py", cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = traindoc("ckpt", "inspect", "out/checkpoint-4", "--expect-lr", "5e-4", "--fail-on", "info", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "hf-folder, training checkpoint, step 4" in res.stderr
    res = traindoc("ckpt", "diff", "out/checkpoint-2", "out/checkpoint-4", cwd=tmp_path)
    assert res.returncode == 0 and "2 optimizer steps apart" in res.stderr, res.stderr
