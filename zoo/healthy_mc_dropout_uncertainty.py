"""Regression with Monte Carlo dropout: the evaluation runs the model in train mode on purpose.

An MLP with two Dropout(0.2) layers (no BatchNorm) fits a noisy 1-D function; every 50 steps
the evaluation estimates predictive uncertainty the MC-dropout way: the model stays in train
mode, and under `torch.no_grad()` the same validation batch goes through it 20 times; the mean
of the passes is the prediction and their spread the uncertainty. Dropout active during this
evaluation is the point of it, not a forgotten model.eval(): the same input tensor fed to the
model again within one evaluation marks the passes as deliberate, and eval-in-train-mode stays
quiet (a BatchNorm in train mode there would still fire: it would fold validation batches into
its running statistics).

traindoc-expect:
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--passes", type=int, default=20, help="stochastic passes per evaluation")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_data(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.rand(n, 1, generator=gen) * 6 - 3
    y = torch.sin(x) + 0.1 * x ** 2 + 0.15 * torch.randn(n, 1, generator=gen)
    return x, y


@torch.no_grad()
def mc_predict(model: nn.Module, x: torch.Tensor, passes: int) -> tuple[torch.Tensor, torch.Tensor]:
    model.train()  # keep dropout on: each pass samples another sub-network
    preds = torch.stack([model(x) for _ in range(passes)])
    return preds.mean(0), preds.std(0)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x, y = make_data(2048, gen)
    x_val, y_val = make_data(256, gen)
    model = nn.Sequential(nn.Linear(1, 64), nn.ReLU(), nn.Dropout(0.2),
                          nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        model.train()
        idx = torch.randint(0, len(x), (args.batch_size,), generator=gen)
        loss = F.mse_loss(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % args.eval_every == 0:
            mean, std = mc_predict(model, x_val, args.passes)
            rmse = math.sqrt(F.mse_loss(mean, y_val).item())
            print(f"step {step + 1:4d} | loss {loss.item():.4f} | val rmse {rmse:.4f} | mean std {std.mean().item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
