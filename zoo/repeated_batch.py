"""Classifier whose loop calls next(iter(loader)) every step: it trains on the first batch forever.

The training set (4096 samples, 64 batches) is wrapped in a DataLoader with shuffle=False, and
the loop fetches data with `x, y = next(iter(loader))`. Each call builds a fresh iterator and
takes its first element, so every step sees the very same 64 samples. The training loss drops
quickly towards 0 (the model memorises one batch) and looks like excellent progress, but the
other 4032 samples are never used; the held-out loss printed at the end is far worse than the
training loss. Reproduces TrainCheck SO-67180955; catalog `repeated-batch`.

traindoc-expect: repeated-batch@0
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
    p.add_argument("--steps", type=int, default=150, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=15)
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


def make_data(n: int, gen: torch.Generator):
    """A hard-ish task: overlapping Gaussian clusters with 10% label noise."""
    centers = torch.randn(N_CLASSES, IN_DIM, generator=gen) * 2.0 / math.sqrt(IN_DIM)
    y = torch.randint(0, N_CLASSES, (n,), generator=gen)
    x = centers[y] + torch.randn(n, IN_DIM, generator=gen)
    flip = torch.rand(n, generator=gen) < 0.1
    y[flip] = torch.randint(0, N_CLASSES, (int(flip.sum()),), generator=gen)
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    x, y = make_data(5120, gen)
    train_set = TensorDataset(x[:4096], y[:4096])
    x_val, y_val = x[4096:], y[4096:]
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=False, num_workers=0)

    model = MLP(IN_DIM, 128, N_CLASSES)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    for step in range(args.steps):
        xb, yb = next(iter(loader))
        loss = F.cross_entropy(model(xb), yb)

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:4d} | loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        val_loss = F.cross_entropy(model(x_val), y_val).item()
    print(f"val loss {val_loss:.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
