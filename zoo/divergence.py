"""House-price regression with a raw-unit feature and SGD just above the stability limit: diverges.

A linear regression (nn.Linear) predicts a price from floor area in square metres (~100, not
standardised) plus five standardised features, trained with plain SGD at `--lr 1e-4` on MSE.
The unscaled column makes the loss curvature ~2e4, so the largest stable step is
2/2e4 = 9.8e-5: lr 1e-4 is just past it. Along that direction every step overshoots a little
further (|1 - lr * lambda_max| ~ 1.05), so the loss and the gradient norm grow geometrically,
~9% per step, by more than 1000x within the run, while every value stays finite for the
default --steps (no NaN to trip anything). Catalog `divergence` and `exploding-gradients`.

traindoc-expect: divergence@29 exploding-gradients@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

N_OTHER = 5


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_listings(n: int, gen: torch.Generator):
    """Floor area in m^2 (raw units) + standardised features -> price in k$."""
    area = 100.0 + 15.0 * torch.randn(n, 1, generator=gen)
    other = torch.randn(n, N_OTHER, generator=gen)
    w_other = torch.randn(N_OTHER, 1, generator=gen) * 20.0
    price = 3.0 * area + other @ w_other + 10.0 * torch.randn(n, 1, generator=gen)
    return torch.cat([area, other], dim=1), price


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    x, y = make_listings(8192, gen)
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(1),
    )

    model = nn.Linear(1 + N_OTHER, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.mse_loss(model(xb), yb)

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                print(f"step {step:4d} | loss {loss.item():.4e}")
            step += 1
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
