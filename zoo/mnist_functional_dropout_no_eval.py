"""MNIST-style convnet with functional dropout whose test() never calls model.eval().

The loop of pytorch/examples' mnist/main.py in its older form, shrunk to 8x8 synthetic digits
(ten noisy stroke templates): two conv layers, max-pooling, `F.dropout2d(x, 0.25,
training=self.training)` and `F.dropout(x, 0.5, training=self.training)` written in forward()
(no Dropout module), log_softmax + nll_loss, Adadelta with a StepLR decay per epoch, a `train()` that calls
`model.train()` and a `test()` under `torch.no_grad()` that prints "Test set: Average loss ...,
Accuracy ...". test() lost its `model.eval()` in a refactor. The model has no Dropout or
BatchNorm module whose mode would show it, and evaluation changes no buffer, but every test pass
runs with dropout active: the printed test accuracy is noisy and lower than the model's (18%,
34%, 46% over the three epochs; the healthy twin, the same script with model.eval(), prints 38%,
63%, 74%). Catalog `eval-in-train-mode`.

traindoc-expect: eval-in-train-mode@24
"""

from __future__ import annotations

import argparse
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--test-batch-size", type=int, default=500)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.7)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = nn.Linear(16 * 2 * 2, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(F.dropout2d(self.conv2(x), 0.25, training=self.training), 2))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        x = F.dropout(x, 0.5, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def digits(n: int, templates: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.randint(0, 10, (n,), generator=gen)
    x = templates[y] + 0.5 * torch.randn(n, 8, 8, generator=gen)
    return ((x - 0.4) / 0.6).unsqueeze(1), y


def train(args: argparse.Namespace, model: Net, data: tuple[torch.Tensor, torch.Tensor],
          optimizer: torch.optim.Optimizer, epoch: int, gen: torch.Generator) -> None:
    model.train()
    x, y = data
    perm = torch.randperm(len(x), generator=gen)
    for batch_idx, start in enumerate(range(0, len(x), args.batch_size)):
        idx = perm[start:start + args.batch_size]
        optimizer.zero_grad()
        loss = F.nll_loss(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{start}/{len(x)}]\tLoss: {loss.item():.6f}")


def test(model: Net, data: tuple[torch.Tensor, torch.Tensor], batch_size: int,
         prepare: Callable[[nn.Module], object] | None) -> None:
    if prepare is not None:  # the healthy twin's model.eval(); this test() lost the call
        prepare(model)
    test_loss, correct = 0.0, 0
    x, y = data
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            output = model(x[start:start + batch_size])
            test_loss += F.nll_loss(output, y[start:start + batch_size], reduction="sum").item()
            correct += int((output.argmax(dim=1) == y[start:start + batch_size]).sum())
    print(f"\nTest set: Average loss: {test_loss / len(x):.4f}, Accuracy: {correct}/{len(x)} "
          f"({100.0 * correct / len(x):.0f}%)\n")


def main(prepare_test: Callable[[nn.Module], object] | None = None) -> None:
    args = get_args()
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(1)
    templates = (torch.rand(10, 8, 8, generator=gen) > 0.6).float()  # one stroke pattern per digit
    train_data, test_data = digits(1600, templates, gen), digits(1000, templates, gen)
    model = Net()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, train_data, optimizer, epoch, gen)
        test(model, test_data, args.test_batch_size, prepare_test)
        scheduler.step()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
