"""What the frameworks' own hooks would tell, the torch-level probes already see, once: the
callbacks override none of these hooks, and these tests keep that true with the real libraries.

- HF ``on_pre_optimizer_step`` / ``on_optimizer_step``: Trainer clips through Accelerate's
  ``clip_grad_norm_`` (torch's): one Clip per optimizer step whose norm is the pre-clip
  ``grad_norm`` Trainer logs; the optimizer's step hooks count the steps.
- HF ``on_evaluate``: the metrics dict it gets is the one ``on_log`` gets (``Trainer.evaluate``
  logs it first); ``val_loss`` arrives once per evaluation, with Trainer's ``eval_loss``.
- HF ``on_save``: Trainer writes optimizer.pt (and scheduler.pt) with ``torch.save``: a SaveFile
  per checkpoint.
- Lightning ``on_before_optimizer_step`` (gradients unscaled, not yet clipped): the Clip event
  of ``gradient_clip_val`` carries the same norm, measured by the clip itself.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

from traindoc.events import Clip, SaveFile, Scalar

HERE = Path(__file__).parent


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is a dev extra")
def test_hf_trainer_clip_eval_and_save_reach_the_engine_once() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    import traindoc.hf

    sys.path.insert(0, str(HERE))
    try:
        from hf_train import SEQ, VOCAB, TokenStream
    finally:
        sys.path.remove(str(HERE))
    recorded: list[object] = []
    callback = traindoc.hf.TraindocCallback()

    class Record(TrainerCallback):  # after ours: the session is open by now
        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            callback.doctor.watch.session._sink = recorded.append

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=SEQ))
    evalset = [x for x, _ in zip(TokenStream(5), range(16))]
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, max_steps=12, logging_steps=4, eval_strategy="steps", eval_steps=6,
            save_strategy="steps", save_steps=6, report_to=[], use_cpu=True, per_device_train_batch_size=8,
            per_device_eval_batch_size=8, max_grad_norm=0.5, learning_rate=1e-3, seed=0, disable_tqdm=True)
        trainer = Trainer(model=model, args=args, train_dataset=TokenStream(0), eval_dataset=evalset,
                          callbacks=[callback, Record()])
        trainer.train()
    history = trainer.state.log_history
    clips = [e for e in recorded if isinstance(e, Clip)]
    assert [c.step for c in clips] == list(range(12)) and {c.max_norm for c in clips} == {0.5}
    logged = {h["step"]: h["grad_norm"] for h in history if "grad_norm" in h}  # global_step: steps done
    assert logged and all(math.isclose(clips[step - 1].norm, norm, rel_tol=1e-5) for step, norm in logged.items())

    evals = [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h]
    val = [(e.step, e.value) for e in recorded if isinstance(e, Scalar) and e.name == "val_loss"]
    assert len(evals) == 2 and [s for s, _ in val] == [s for s, _ in evals]
    assert [v for _, v in val] == pytest.approx([v for _, v in evals])

    saved = [e for e in recorded if isinstance(e, SaveFile)]
    assert [(e.step, Path(e.path).parent.name) for e in saved if e.path.endswith("optimizer.pt")] == [
        (6, "checkpoint-6"), (12, "checkpoint-12")]


@pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning is a dev extra")
def test_lightning_clip_norm_is_the_unscaled_pre_clip_norm_of_on_before_optimizer_step() -> None:
    import lightning as L
    import torch.nn as nn
    import torch.nn.functional as F
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
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    norms: list[float] = []
    recorded: list[object] = []
    ours = traindoc.lightning.TraindocCallback()

    class Measure(L.Callback):
        def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            ours.doctor.watch.session._sink = recorded.append

        def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                     optimizer: torch.optim.Optimizer) -> None:
            grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
            norms.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))))

    L.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(160, 8, generator=g), 10.0 * torch.randn(160, 1, generator=g))
    trainer = L.Trainer(max_steps=10, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, gradient_clip_val=1.0,
                        callbacks=[ours, Measure()])
    trainer.fit(Regressor(), DataLoader(data, batch_size=16))
    clips = [e for e in recorded if isinstance(e, Clip)]
    assert [c.step for c in clips] == list(range(10))
    assert [c.norm for c in clips] == pytest.approx(norms, rel=1e-5)
    assert all(n > 1.0 for n in norms)  # it clipped: the norms are from before the clip
