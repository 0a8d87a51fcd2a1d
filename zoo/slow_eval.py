"""Classifier that validates on the full validation set every 5 steps: most of the run is eval.

A debug-run setting kept for the real run (seed 003 §14: `eval_interval=100` over 3000 steps
made training take 36.9 minutes instead of ~24). Here an MLP trains for 60 steps and runs a
full pass over 4096 validation samples, in batches of 32, every 5 steps: twelve evaluations
that together take well over half of the wall time. Training itself is healthy; traindoc
reports `slow-eval` as info (it costs time, it does not break training), so no warning or
error is expected.

traindoc-expect:
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
    p.add_argument("--steps", type=int, default=60, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-interval", type=int, default=5)
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


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader) -> tuple[float, float]:
    model.eval()
    loss_sum, correct, total = 0.0, 0, 0
    for xb, yb in loader:
        logits = model(xb)
        loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(dim=1) == yb).sum().item()
        total += yb.numel()
    model.train()
    return loss_sum / total, correct / total


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x, y = make_data(6144)
    train_loader = DataLoader(TensorDataset(x[:2048], y[:2048]), batch_size=args.batch_size,
                              shuffle=True, drop_last=True)
    val_loader = DataLoader(TensorDataset(x[2048:], y[2048:]), batch_size=32)

    model = MLP(IN_DIM, 128, N_CLASSES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in train_loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.eval_interval == 0:
                val_loss, val_acc = evaluate(model, val_loader)
                print(f"step {step:4d} | loss {loss.item():.4f} | val loss {val_loss:.4f} | val acc {val_acc:.3f}")
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
