"""Healthy small CNN whose BatchNorm statistics are re-estimated ("precise BN") before each evaluation.

Running averages of BatchNorm statistics lag behind weights that keep moving, so some
recipes re-estimate them with the weights fixed before evaluating (the precise-BN routines of
fvcore/detectron2 and pycls, read for this case; "Rethinking 'Batch' in BatchNorm", 2021).
This script does it the cumulative way: for every BatchNorm layer `reset_running_stats()` and
`momentum=None` (an equal-weight average), then forward passes in train mode under
`torch.no_grad()` over a few training batches, then the momenta back, `model.eval()` and the
evaluation proper, then `model.train()`. The train-mode passes under no_grad are deliberate
and the statistics they start from are reset on purpose: not an evaluation in train mode
and not stale statistics. The run must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--calib-batches", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_split(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """8x8 single-channel images: class 0 brighter on the left half, class 1 on the right."""
    y = torch.randint(0, 2, (n,), generator=gen)
    x = torch.randn(n, 1, 8, 8, generator=gen)
    x[y == 0, :, :, :4] += 1.0
    x[y == 1, :, :, 4:] += 1.0
    return x, y


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


def recalibrate_bn(model: nn.Module, batches: list[torch.Tensor]) -> None:
    """Re-estimate every BatchNorm's running statistics with the current weights."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for xb in batches:
            model(xb)
    for m, momentum in zip(norms, saved):
        m.momentum = momentum


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x_train, y_train = make_split(1024, gen)
    x_val, y_val = make_split(256, gen)
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    for step in range(1, args.steps + 1):
        idx = torch.randint(0, len(x_train), (args.batch_size,), generator=gen)
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % args.eval_every == 0:
            calib = [x_train[i:i + args.batch_size] for i in range(0, args.calib_batches * args.batch_size,
                                                                   args.batch_size)]
            recalibrate_bn(model, calib)
            model.eval()
            with torch.no_grad():
                acc = (model(x_val).argmax(1) == y_val).float().mean().item()
            model.train()
            print(f"step {step}: train loss {loss.item():.3f}, val acc {acc:.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
