"""A small Lightning script: an MLP classifier (LightningModule + LightningDataModule) on
synthetic Gaussian classes, CPU. Lightning's defaults stay on: a checkpoint at the end of every
epoch and the logger, both under lightning_logs/ in the working folder.

--bug head_init   the head initialised with nn.init.normal_(w), whose default std is 1.0: on
                  the LayerNorm'd features, logits of std about 8 at step 0, confident and wrong
--bug tiny_lr     AdamW(lr=1e-6) in configure_optimizers: an Adam epsilon pasted into the LR
--resume          resumable as Lightning's docs show: ModelCheckpoint(dirpath="checkpoints",
                  save_last=True) and trainer.fit(..., ckpt_path="last"). The checkpoint holds
                  no global RNG state, so the resumed epoch shuffles its batches differently
                  from an uninterrupted run (the resume probe's finding)
"""

import argparse
import math

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

IN_DIM, HIDDEN, N_CLASSES = 16, 64, 4


class GaussianClasses(L.LightningDataModule):
    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        gen = torch.Generator().manual_seed(0)
        centers = torch.randn(N_CLASSES, IN_DIM, generator=gen) * 3.0 / math.sqrt(IN_DIM)
        y = torch.randint(0, N_CLASSES, (768,), generator=gen)
        x = centers[y] + torch.randn(768, IN_DIM, generator=gen)
        self.train_set, self.val_set = TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=128)


class Classifier(L.LightningModule):
    def __init__(self, lr: float = 3e-3, bug: str = "") -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = nn.Sequential(nn.Linear(IN_DIM, HIDDEN), nn.GELU(), nn.Dropout(0.1),
                                      nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.LayerNorm(HIDDEN))
        self.head = nn.Linear(HIDDEN, N_CLASSES)
        if bug == "head_init":
            nn.init.normal_(self.head.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        lr = 1e-6 if self.hparams.bug == "tiny_lr" else self.hparams.lr
        optimizer = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=0.01)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.trainer.max_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bug", default="", choices=["", "head_init", "tiny_lr"])
    p.add_argument("--max-steps", type=int, default=400)
    p.add_argument("--resume", action="store_true")
    args = p.parse_args()
    L.seed_everything(0, verbose=False)
    callbacks = [ModelCheckpoint(dirpath="checkpoints", save_last=True)] if args.resume else []
    trainer = L.Trainer(max_steps=args.max_steps, accelerator="cpu", devices=1, callbacks=callbacks,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(Classifier(bug=args.bug), datamodule=GaussianClasses(), ckpt_path="last" if args.resume else None)
    print(trainer.callback_metrics)


if __name__ == "__main__":
    main()
