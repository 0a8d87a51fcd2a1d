"""A Lightning script for traindoc's real-client tests: a small classifier as an L.LightningModule.

Synthetic data (4 Gaussian classes in 16 dimensions, drawn in the script) feed an MLP backbone
plus a linear side branch (a skip path) and a linear head. training_step logs its loss with
self.log, validation_step logs the validation loss and accuracy, configure_optimizers returns
AdamW with a per-step cosine schedule. L.Trainer(max_steps=60, accelerator="cpu", logger=False,
enable_checkpointing=False, enable_progress_bar=False) fits it, validating every epoch.

`--bug NAME` injects one mistake as a user would write it:

  tiny_lr           AdamW(lr=1e-6)
  detached_branch   the side branch's features are `.detach()`ed in forward ("a fixed feature"),
                    so its Linear layer, which the optimizer holds, never gets a gradient
  bf16_true         L.Trainer(precision="bf16-true") where "bf16-mixed" was meant: the weights
                    themselves are stored in bf16
  manual_no_zero    manual optimization (automatic_optimization = False) whose training_step
                    calls manual_backward and opt.step() but never opt.zero_grad()

`--accumulate N` sets accumulate_grad_batches (a healthy variant: Lightning divides the loss);
`--save PATH` writes the final model.state_dict() (the bit-identity check).
"""

import argparse
import math

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IN_DIM, N_CLASSES = 16, 4


def get_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bug", default="", choices=["", "tiny_lr", "detached_branch", "bf16_true", "manual_no_zero"])
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--save", default=None, help="write the final model.state_dict() here")
    return p.parse_args()


class Classifier(L.LightningModule):
    def __init__(self, lr, max_steps, bug=""):
        super().__init__()
        self.save_hyperparameters()
        self.backbone = nn.Sequential(nn.Linear(IN_DIM, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU())
        self.side = nn.Linear(IN_DIM, 64)
        self.head = nn.Linear(64, N_CLASSES)
        if bug == "manual_no_zero":
            self.automatic_optimization = False

    def forward(self, x):
        side = self.side(x)
        if self.hparams.bug == "detached_branch":
            side = side.detach()  # "use the side branch as a fixed feature"
        return self.head(self.backbone(x) + side)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        self.manual_backward(loss)
        opt.step()  # the opt.zero_grad() before manual_backward is missing
        self.lr_schedulers().step()
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        lr = 1e-6 if self.hparams.bug == "tiny_lr" else self.hparams.lr
        opt = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.hparams.max_steps, eta_min=lr / 10)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def make_data(n, centers, gen):
    y = torch.randint(0, N_CLASSES, (n,), generator=gen)
    return centers[y] + torch.randn(n, IN_DIM, generator=gen), y


def main():
    args = get_args()
    L.seed_everything(0, verbose=False)
    gen = torch.Generator().manual_seed(0)
    centers = torch.randn(N_CLASSES, IN_DIM, generator=gen) * 3.0 / math.sqrt(IN_DIM)
    x, y = make_data(1024, centers, gen)
    xv, yv = make_data(256, centers, gen)
    train = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    val = DataLoader(TensorDataset(xv, yv), batch_size=128)

    model = Classifier(args.lr, args.max_steps, args.bug)
    trainer = L.Trainer(
        max_steps=args.max_steps, accelerator="cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        accumulate_grad_batches=args.accumulate,
        precision="bf16-true" if args.bug == "bf16_true" else "32-true",
    )
    trainer.fit(model, train, val)
    print({k: round(float(v), 4) for k, v in trainer.callback_metrics.items()})

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
