"""Healthy classifier with gradient accumulation over 4 micro-batches, each loss divided by 4.

The twin of unscaled_accumulation.py done right (seed 003 §7): micro-batches of 64 from a
DataLoader, `loss = loss / accum_steps` before `loss.backward()`, SGD (momentum 0.9, lr 0.05)
stepped every 4 micro-batches, gradients cleared once per optimizer step with
`zero_grad(set_to_none=True)`. The accumulated gradient is the mean over the 256 samples.

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
    p.add_argument("--steps", type=int, default=40, help="optimizer steps")
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--accum-steps", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--log-every", type=int, default=10)
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
    x, y = make_data(4096)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.micro_batch, shuffle=True, drop_last=True)

    model = MLP(IN_DIM, 128, N_CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    model.train()
    step, micro, loss_accum = 0, 0, 0.0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            loss = loss / args.accum_steps  # the mean over the accumulated batch
            loss_accum += loss.item()
            loss.backward()
            micro += 1
            if micro % args.accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if step % args.log_every == 0:
                    print(f"step {step:4d} | loss {loss_accum:.4f}")
                loss_accum = 0.0
                step += 1
                if step >= args.steps:
                    break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
