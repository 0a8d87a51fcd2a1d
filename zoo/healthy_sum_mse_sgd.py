"""Healthy multi-output regression with a summed squared error and plain SGD sized for the sum.

An older style of regression code: `nn.MSELoss(reduction="sum")` over a batch of 512 samples
and 16 targets, so the loss and its gradient are the batch's sums (the norm is ~1.2e4, 1000x the
weights, and falls as the fit improves), and plain SGD whose LR is divided by the batch size
(`lr = base_lr / batch_size`) to keep the step of a mean. Each step moves the weights by at
most 7% of their norm: the large gradient norm is the loss's scale, not an explosion. The run
must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--base-lr", type=float, default=0.01)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 24, generator=gen)
    mixing = torch.randn(24, 16, generator=gen) / 24 ** 0.5
    y = 3.0 * torch.sin(x @ mixing) + 2.0 + 0.1 * torch.randn(4096, 16, generator=gen)  # targets of scale ~3
    model = nn.Sequential(nn.Linear(24, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 16))
    criterion = nn.MSELoss(reduction="sum")
    opt = torch.optim.SGD(model.parameters(), lr=args.base_lr / args.batch_size)
    for epoch in range(args.epochs):
        perm = torch.randperm(len(x), generator=gen)
        total = 0.0
        for i in range(0, len(x), args.batch_size):
            idx = perm[i:i + args.batch_size]
            loss = criterion(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch}: mean squared error per target {total / y.numel():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
