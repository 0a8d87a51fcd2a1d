"""CNN validated on an EMA copy whose BatchNorm running statistics are never updated.

Seed 004's bug, small: a CNN with BatchNorm trained with SGD, and an exponential moving average
of the weights made with `copy.deepcopy(model)` before training and updated after every step
with `for e, p in zip(ema.parameters(), model.parameters()): e.mul_(d).add_(p, alpha=1 - d)`.
Only the parameters are averaged: the EMA's BatchNorm buffers keep the `running_mean = 0`,
`running_var = 1` of the copy made at step 0. Validation runs on the EMA (in eval mode, under
no_grad, all done right otherwise), so every BatchNorm layer normalizes with statistics that do
not describe the data, and validation accuracy sits near chance while the live model is fine.
(Seed 004: "Validation accuracy stuck at 0.10% ... EMA model had broken batch normalization
statistics".) Catalog `stale-bn-eval`.

traindoc-expect: stale-bn-eval
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

N_CLASSES = 4


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--ema-decay", type=float, default=0.9)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def make_images(n: int, size: int = 12):
    """Each class is a bright bar (row or column, left or right half) on a shifted background."""
    y = torch.randint(0, N_CLASSES, (n,))
    x = 3.0 + 0.5 * torch.randn(n, 1, size, size)
    for i in range(n):
        k = int(y[i])
        if k < 2:
            x[i, 0, :, 2 + 6 * k : 4 + 6 * k] += 3.0
        else:
            x[i, 0, 2 + 6 * (k - 2) : 4 + 6 * (k - 2), :] += 3.0
    return x, y


@torch.no_grad()
def update_ema(ema: nn.Module, model: nn.Module, decay: float) -> None:
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(decay).add_(p, alpha=1 - decay)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    acc = (model(x).argmax(dim=1) == y).float().mean().item()
    return acc


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x, y = make_images(1280)
    loader = DataLoader(TensorDataset(x[:1024], y[:1024]), batch_size=args.batch_size,
                        shuffle=True, drop_last=True)
    x_val, y_val = x[1024:], y[1024:]

    model = SmallCNN()
    ema = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            update_ema(ema, model, args.ema_decay)
            step += 1
            if step % args.eval_every == 0:
                print(f"step {step:4d} | loss {loss.item():.4f} | val acc (ema) {evaluate(ema, x_val, y_val):.3f}")
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
