"""A small convnet whose forward ends in F.softmax, trained with F.nll_loss.

Written in the style of pytorch/examples' mnist/main.py (a `Net` module, `train(args, model,
device, loader, optimizer, epoch)` and `test(...)` functions, `F.nll_loss` on the model's
output), with one change that is easy to make: the forward returns `F.softmax(x, dim=1)` where
the example returns `F.log_softmax`. nll_loss expects log-probabilities, so it minimizes -p, a
loss between -1 and 0: the printed loss is negative, and a wrong answer held with confidence
gets almost no gradient (no log pulls it back). The test accuracy still rises.

traindoc-expect: cross-entropy-on-probabilities@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, log: bool = False) -> None:
        super().__init__()
        self.log = log
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.fc1 = nn.Linear(8 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        x = self.fc2(x)
        return F.log_softmax(x, dim=1) if self.log else F.softmax(x, dim=1)


def shapes(n: int, g: torch.Generator) -> TensorDataset:
    """12x12 images of 4 classes: a bright bar in one of four places, plus noise."""
    y = torch.randint(0, 4, (n,), generator=g)
    x = 0.3 * torch.randn(n, 1, 12, 12, generator=g)
    for c in range(4):
        rows = y == c
        x[rows, 0, 3 * c:3 * c + 3, 2:10] += 1.0
    return TensorDataset(x, y)


def train(args: argparse.Namespace, model: nn.Module, device: torch.device, train_loader: DataLoader,
          optimizer: torch.optim.Optimizer, epoch: int) -> None:
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]\tLoss: {loss.item():.6f}")


def test(model: nn.Module, device: torch.device, test_loader: DataLoader) -> None:
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data.to(device))
            correct += int(output.argmax(dim=1).eq(target.to(device)).sum())
    print(f"Test set: Accuracy: {correct}/{len(test_loader.dataset)}")


def main(log: bool = False) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--log-interval", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    args = p.parse_args()
    torch.manual_seed(1)
    g = torch.Generator().manual_seed(0)
    device = torch.device("cpu")
    train_loader = DataLoader(shapes(1024, g), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(shapes(256, g), batch_size=256)
    model = Net(log=log).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
