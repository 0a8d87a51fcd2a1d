"""A tiny Lightning script (an MLP classifier on synthetic Gaussian classes, CPU) run with
``--callback`` (traindoc.lightning.TraindocCallback), with ``TRAINDOC=1`` (the entry point adds
the callback) or under ``traindoc run``.

--bug tiny_lr          AdamW(lr=1e-6)
--bug detached_branch  the side branch's features are .detach()ed: its Linear never gets a gradient
--bug bf16_true        L.Trainer(precision="bf16-true"): the weights themselves are bf16
--accumulate N         accumulate_grad_batches (healthy: Lightning divides the loss)
--save-ckpt PATH / --resume PATH   a checkpoint at the end / fit resumed from one
--tb-logger DIR        a TensorBoardLogger in DIR, and the callback's export=True
"""

import argparse
import json
import math

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IN_DIM, N_CLASSES = 16, 4


class Classifier(L.LightningModule):
    def __init__(self, lr, bug=""):
        super().__init__()
        self.save_hyperparameters()
        self.backbone = nn.Sequential(nn.Linear(IN_DIM, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU())
        self.side = nn.Linear(IN_DIM, 32)
        self.head = nn.Linear(32, N_CLASSES)

    def forward(self, x):
        side = self.side(x)
        if self.hparams.bug == "detached_branch":
            side = side.detach()
        return self.head(self.backbone(x) + side)

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
        return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=0.01)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bug", default="", choices=["", "tiny_lr", "detached_branch", "bf16_true"])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--callback", metavar="JSON", help="add traindoc.lightning.TraindocCallback(json=JSON)")
    p.add_argument("--save-ckpt", default=None)
    p.add_argument("--resume", default=None)
    p.add_argument("--tb-logger", default=None)
    args = p.parse_args()
    L.seed_everything(0, verbose=False)
    gen = torch.Generator().manual_seed(0)
    centers = torch.randn(N_CLASSES, IN_DIM, generator=gen) * 3.0 / math.sqrt(IN_DIM)
    y = torch.randint(0, N_CLASSES, (768,), generator=gen)
    x = centers[y] + torch.randn(768, IN_DIM, generator=gen)
    train = DataLoader(TensorDataset(x[:512], y[:512]), batch_size=32, shuffle=True)
    val = DataLoader(TensorDataset(x[512:], y[512:]), batch_size=128)
    callbacks = []
    if args.callback:
        import traindoc.lightning

        callbacks.append(traindoc.lightning.TraindocCallback(json=args.callback, export=bool(args.tb_logger)))
    logger = False
    if args.tb_logger:
        from lightning.pytorch.loggers import TensorBoardLogger

        logger = TensorBoardLogger(save_dir=args.tb_logger, name="", version="")
    trainer = L.Trainer(
        max_steps=args.steps, accelerator="cpu", devices=1, logger=logger, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accumulate_grad_batches=args.accumulate,
        precision="bf16-true" if args.bug == "bf16_true" else "32-true", callbacks=callbacks,
        num_sanity_val_steps=0,
    )
    trainer.fit(Classifier(3e-3, args.bug), train, val, ckpt_path=args.resume)
    if args.save_ckpt:
        trainer.save_checkpoint(args.save_ckpt)
    print(json.dumps({k: round(float(v), 4) for k, v in trainer.callback_metrics.items()}))


if __name__ == "__main__":
    main()
