"""Tabular classifier with BatchNorm and Dropout whose evaluate() never calls model.eval().

An MLP with BatchNorm1d and Dropout(0.3) trained with AdamW; every 20 steps a validation pass
runs under `@torch.no_grad()`, but the evaluation function was copied from a notebook where
`model.eval()` happened in another cell. The model stays in train mode: Dropout drops 30% of the
units during validation and BatchNorm normalizes with each validation batch's statistics and
folds the validation data into its running statistics, so the printed validation accuracy is
noisy, too low, and evaluation changes the model. Catalog `eval-in-train-mode`.

traindoc-expect: eval-in-train-mode@19
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IN_DIM = 24
N_CLASSES = 5


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class TabularNet(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int, dropout: float = 0.3) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_data(n: int):
    centers = torch.randn(N_CLASSES, IN_DIM) * 3.0 / math.sqrt(IN_DIM)
    y = torch.randint(0, N_CLASSES, (n,))
    return centers[y] + torch.randn(n, IN_DIM) * 1.5 + 2.0, y


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader) -> float:
    correct = total = 0
    for xb, yb in loader:
        correct += (model(xb).argmax(dim=1) == yb).sum().item()
        total += yb.numel()
    return correct / total


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x, y = make_data(2560)
    train_loader = DataLoader(TensorDataset(x[:2048], y[:2048]), batch_size=args.batch_size,
                              shuffle=True, drop_last=True)
    val_loader = DataLoader(TensorDataset(x[2048:], y[2048:]), batch_size=256)

    model = TabularNet(IN_DIM, 64, N_CLASSES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in train_loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.eval_every == 0:
                print(f"step {step:4d} | loss {loss.item():.4f} | val acc {evaluate(model, val_loader):.3f}")
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
