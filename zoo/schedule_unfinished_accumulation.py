"""Gradient accumulation whose step budget uses floor division: training stops with the LR schedule two-thirds done.

The loop of Hugging Face's `no_trainer` example scripts, by hand: a config dict, gradient
accumulation over 4 micro-batches with an optimizer step on the last, partial window of each
epoch too, a linear warmup-decay schedule sized from the epochs
(`epochs * ceil(len(loader) / accum)` = 24 steps), and a step budget computed as
`epochs * (len(loader) // accum)` = 16 (TrainCheck's TF-33455). The loop breaks when the budget
is reached: after 5 of its 8 epochs, with the LR still at a third of its peak. The loss looks
fine; the run is simply not the one that was configured.

traindoc-expect: schedule-unfinished@16
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, TensorDataset

CONFIG = {"epochs": 8, "accum": 4, "batch_size": 16, "lr": 3e-3, "warmup": 2}


def linear_warmup_decay(optimizer: torch.optim.Optimizer, warmup: int, num_training_steps: int) -> LambdaLR:
    def lr_lambda(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (num_training_steps - step) / max(1, num_training_steps - warmup))

    return LambdaLR(optimizer, lr_lambda)


def main(budget_from_ceil: bool = False) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(160, 12)
    y = (x[:, :3].sum(1, keepdim=True) > 0).float()
    loader = DataLoader(TensorDataset(x, y), batch_size=CONFIG["batch_size"], shuffle=True,
                        generator=torch.Generator().manual_seed(0))  # 10 micro-batches per epoch
    model = nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=CONFIG["lr"])
    accum = CONFIG["accum"]
    updates_per_epoch = math.ceil(len(loader) / accum)
    scheduler = linear_warmup_decay(optimizer, CONFIG["warmup"], CONFIG["epochs"] * updates_per_epoch)
    if budget_from_ceil:
        max_train_steps = CONFIG["epochs"] * updates_per_epoch
    else:
        max_train_steps = CONFIG["epochs"] * (len(loader) // accum)
    loss_fn = nn.BCEWithLogitsLoss()
    completed_steps = 0
    for epoch in range(CONFIG["epochs"]):
        for i, (xb, yb) in enumerate(loader):
            loss = loss_fn(model(xb), yb) / accum
            loss.backward()
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                completed_steps += 1
            if completed_steps >= max_train_steps:
                break
        print(f"epoch {epoch} loss {loss.item() * accum:.4f} lr {scheduler.get_last_lr()[0]:.2e}")
        if completed_steps >= max_train_steps:
            break
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
