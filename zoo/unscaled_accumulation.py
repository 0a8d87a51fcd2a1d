"""Classifier with gradient accumulation over 4 micro-batches whose loss is never divided by 4.

The script emulates a batch of 256 on a small device: it draws micro-batches of 64 from a
DataLoader, calls `loss.backward()` on each, and steps SGD (momentum 0.9, lr 0.05, tuned for
one batch of 256) every 4 micro-batches, then clears the gradients. The line
`loss = loss / accum_steps` is missing, so each step applies the *sum* of 4 micro-batch
gradients: the gradient norm at the step is 2-4x that of one micro-batch and SGD's effective LR
is 0.2 instead of 0.05. Training still converges on this easy task, so nothing looks wrong.
Seed 003 §7 marks the division as the critical line of its accumulation loop; catalog
`unscaled-grad-accumulation`.

traindoc-expect: unscaled-grad-accumulation@0
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
    step, micro = 0, 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()  # accumulate: one optimizer step per accum_steps micro-batches
            micro += 1
            if micro % args.accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if step % args.log_every == 0:
                    print(f"step {step:4d} | loss {loss.item():.4f}")
                step += 1
                if step >= args.steps:
                    break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
