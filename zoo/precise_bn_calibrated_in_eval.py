"""BatchNorm statistics reset for re-estimation, then "re-estimated" with the model in eval mode.

A small BatchNorm MLP on tabular data whose `evaluate()` refreshes the BatchNorm statistics
first, the way precise-BN recipes do: `reset_running_stats()` on every BatchNorm layer, then
forward passes over some training batches under `torch.no_grad()`. But `evaluate()` opens
with `model.eval()`, so those forwards normalize with the freshly reset statistics and update
nothing: every evaluation reads running_mean 0 and running_var 1 in a trained model. The
validation accuracy is that of a network whose normalization no longer matches its weights.
The twin of zoo/healthy_precise_bn.py; catalog `stale-bn-eval`.

traindoc-expect: stale-bn-eval
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_data(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 10, generator=gen) * 3 + 2  # unnormalized features: BN matters
    y = ((x[:, 0] - 2) * (x[:, 1] - 2) > 0).long()
    return x, y


def evaluate(model: nn.Module, calib: torch.Tensor, x_val: torch.Tensor, y_val: torch.Tensor) -> float:
    model.eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.reset_running_stats()
    with torch.no_grad():
        for xb in calib.split(64):
            model(xb)  # meant to refresh the statistics; in eval mode it only reads them
        acc = (model(x_val).argmax(1) == y_val).float().mean().item()
    model.train()
    return acc


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x, y = make_data(1280, gen)
    x_val, y_val = make_data(256, gen)
    model = nn.Sequential(nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(),
                          nn.Linear(32, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for epoch in range(args.epochs):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), args.batch_size):
            idx = perm[i:i + args.batch_size]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        acc = evaluate(model, x[:256], x_val, y_val)
        print(f"epoch {epoch}: loss {loss.item():.3f}, val acc {acc:.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
