"""Battery state-of-health regression trained with cross_entropy on one output: it learns nothing.

A `Trainer` class in the style of PyTorch's DDP tutorial series (pytorch/examples,
distributed/ddp-tutorial-series, read before writing this): `_run_batch` zeroes the
gradients, runs the model and a functional loss, steps; `_run_epoch` walks the loader;
`train` loops over epochs. The model maps 16 cell-sensor
readings to one number, the state of health scaled to [0, 1], and the loss is
`F.cross_entropy(output, targets)` with float targets of shape `[B, 1]`: a cross-entropy over
one class. Its log_softmax is 0 for every row, so the loss is exactly 0 (printed as -0.0000) on
every step and every gradient is 0: the weights never move. The tutorial's own
`nn.Linear(20, 1)` with `F.cross_entropy` trains nothing for the same reason.

traindoc-expect: single-class-softmax@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class CellReadings(Dataset):
    """16 readings per cell (voltages, temperatures, impedances) and its state of health in [0, 1]."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=g)
        w = torch.randn(16, generator=g) / 4
        self.y = torch.sigmoid(self.x @ w + 0.1 * torch.randn(n, generator=g)).unsqueeze(1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class Trainer:
    def __init__(self, model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer,
                 loss: str) -> None:
        self.model = model
        self.loader = loader
        self.optimizer = optimizer
        self.loss = loss
        self.last_loss = float("nan")

    def _criterion(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.loss == "mse":
            return F.mse_loss(output, targets)
        return F.cross_entropy(output, targets)

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = self._criterion(output, targets)
        loss.backward()
        self.optimizer.step()
        self.last_loss = loss.item()

    def _run_epoch(self, epoch: int) -> None:
        for source, targets in self.loader:
            self._run_batch(source, targets)
        print(f"Epoch {epoch} | Steps: {len(self.loader)} | last loss {self.last_loss:.4f}")

    def train(self, max_epochs: int) -> None:
        for epoch in range(max_epochs):
            self._run_epoch(epoch)


def main(loss: str = "cross_entropy") -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    loader = DataLoader(CellReadings(1024), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    Trainer(model, loader, optimizer, loss).train(args.epochs)
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
