"""Healthy CNN validated on an EMA copy that averages the BatchNorm buffers too.

The twin of ema_stale_bn.py done right: the EMA is
`AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)` (both from
`torch.optim.swa_utils`), updated after every step with `ema.update_parameters(model)`, so its
BatchNorm running statistics follow the training model's. Validation on the EMA (eval mode,
no_grad) tracks the live model.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
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
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(args.ema_decay), use_buffers=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            ema.update_parameters(model)
            step += 1
            if step % args.eval_every == 0:
                print(f"step {step:4d} | loss {loss.item():.4f} | val acc (ema) {evaluate(ema, x_val, y_val):.3f}")
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
