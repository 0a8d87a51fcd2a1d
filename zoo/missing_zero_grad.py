"""Regression MLP whose optimizer.zero_grad() sits one indentation level too far out.

A small MLP regressor trained with Adam (lr 1e-3) on a DataLoader. During a refactor the
`optimizer.zero_grad()` line ended up in the epoch loop instead of the batch loop, so the
gradients are cleared once per epoch (every 16 steps) and in between each `loss.backward()`
adds to the gradients of all previous steps of the epoch: the gradient norm seen by Adam grows
step after step, and every update follows a running sum dominated by old batches. Nothing
errors and the loss still moves, so it looks like an LR that needs tuning. Catalog
`missing-zero-grad`.

traindoc-expect: missing-zero-grad@1
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IN_DIM = 16


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_data(n: int):
    w = torch.randn(IN_DIM, 1)
    x = torch.randn(n, IN_DIM)
    y = torch.tanh(x @ w / 2) + 0.1 * torch.randn(n, 1)
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x, y = make_data(1024)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)

    model = nn.Sequential(nn.Linear(IN_DIM, 64), nn.Tanh(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    for epoch in range(args.epochs):
        optimizer.zero_grad()
        total = 0.0
        for xb, yb in loader:
            loss = F.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch} | train mse {total / len(loader):.4f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
