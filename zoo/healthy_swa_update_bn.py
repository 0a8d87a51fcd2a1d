"""Healthy SWA run: BatchNorm statistics recomputed with `swa_utils.update_bn` before each evaluation.

A BatchNorm CNN trained with SGD by epochs over a DataLoader; from the second epoch on,
`AveragedModel` averages the weights after every epoch and `SWALR` holds the LR. An averaged
model's BatchNorm statistics belong to none of the weights it averaged, so before evaluating it
the script recomputes them: `torch.optim.swa_utils.update_bn(train_loader, swa_model)` (which
resets the statistics, sets `momentum=None` and runs the model in train mode), called under
`torch.no_grad()`, then `swa_model.eval()` and the evaluation. The train-mode passes are the
recomputation, not an evaluation, and the statistics they start from are reset on purpose.
The run must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def images(n: int, gen: torch.Generator) -> TensorDataset:
    """1x8x8 images; the label says whether the top half is brighter than the bottom."""
    x = torch.randn(n, 1, 8, 8, generator=gen)
    y = (x[:, :, :4].mean((1, 2, 3)) > x[:, :, 4:].mean((1, 2, 3))).long()
    return TensorDataset(x, y)


def net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2),
    )


def accuracy(model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    right = total = 0
    with torch.no_grad():
        for xb, yb in loader:
            right += int((model(xb).argmax(1) == yb).sum())
            total += len(yb)
    return right / total


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    train_loader = DataLoader(images(768, gen), batch_size=args.batch_size, shuffle=True,
                              generator=torch.Generator().manual_seed(1))
    val_loader = DataLoader(images(256, gen), batch_size=128)
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    swa_model = AveragedModel(model)
    swa_sched = SWALR(opt, swa_lr=0.02, anneal_epochs=1)
    for epoch in range(args.epochs):
        model.train()
        for xb, yb in train_loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if epoch >= 1:
            swa_model.update_parameters(model)
            swa_sched.step()
            with torch.no_grad():
                update_bn(train_loader, swa_model)
            print(f"epoch {epoch}: loss {loss.item():.3f}, swa val acc {accuracy(swa_model, val_loader):.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
