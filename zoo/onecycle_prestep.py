"""Classifier with a per-epoch OneCycleLR that is "pre-stepped" once after it is built.

Seed 004's loop: SGD with momentum and a OneCycleLR stepped once per epoch (max_lr 0.1 here,
div_factor 25, so the schedule starts at 0.004 and warms up over 8 of 40 epochs). To silence
PyTorch's warning about the scheduler order, `scheduler.step()` is called once right after the
scheduler is built, before any `optimizer.step()` (and `total_steps` gets a +1 so that the
last epoch does not step past the end). PyTorch then skips the schedule's first value:
the first epoch trains at 0.0085 instead of 0.004 (2.1x), and every later epoch uses the LR meant
for the next one. (Seed 004: "Causes LR to start at 0.061 instead of 0.032".) Training itself
works, so the quirk gets accepted. Catalog `scheduler-before-optimizer`.

traindoc-expect: scheduler-before-optimizer@0
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IN_DIM = 32
N_CLASSES = 10


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--warmup-epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1, help="OneCycleLR max_lr")
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class MLP(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_data(n: int):
    centers = torch.randn(N_CLASSES, IN_DIM) * 4.0 / math.sqrt(IN_DIM)
    y = torch.randint(0, N_CLASSES, (n,))
    return centers[y] + torch.randn(n, IN_DIM), y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x, y = make_data(512)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True)

    model = MLP(IN_DIM, 64, N_CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.epochs + 1,  # +1 for the pre-step
        pct_start=args.warmup_epochs / args.epochs,
    )
    scheduler.step()  # pre-step to avoid PyTorch warning

    model.train()
    for epoch in range(args.epochs):
        total = 0.0
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item()
        scheduler.step()
        if epoch % 10 == 0 or epoch == args.epochs - 1:
            print(f"epoch {epoch:3d} | loss {total / len(loader):.4f} | lr {scheduler.get_last_lr()[0]:.4f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
