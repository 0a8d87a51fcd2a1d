"""Convolutional digit-style classifier in the style of PyTorch's MNIST example: the network's
forward ends in `F.log_softmax`, the criterion is `nn.NLLLoss()`, batches come from a
DataLoader, and every epoch ends with a test pass under `torch.no_grad()`. Healthy: the first
loss is near ln(10) and falls.

The images are 16x16 strokes drawn per class (a bar at a class-specific angle plus noise), so
a small convnet learns them in a few epochs on a CPU.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SIDE, N_CLASSES = 16, 10


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def strokes(n: int, g: torch.Generator) -> TensorDataset:
    labels = torch.randint(0, N_CLASSES, (n,), generator=g)
    angle = labels.float() * math.pi / N_CLASSES
    coords = torch.linspace(-1, 1, SIDE)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    dist = (xx[None] * torch.sin(angle)[:, None, None] - yy[None] * torch.cos(angle)[:, None, None]).abs()
    images = torch.exp(-(dist / 0.15) ** 2) + 0.3 * torch.randn(n, SIDE, SIDE, generator=g)
    return TensorDataset(images.unsqueeze(1), labels)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(16 * 6 * 6, 64)
        self.fc2 = nn.Linear(64, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(torch.flatten(x, 1))
        x = self.fc2(F.relu(self.fc1(x)))
        return F.log_softmax(x, dim=1)


def main() -> None:
    args = get_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    train_loader = DataLoader(strokes(1024, g), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(strokes(256, g), batch_size=128)
    model = Net()
    criterion = nn.NLLLoss()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        model.train()
        for data, target in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(data), target)
            loss.backward()
            optimizer.step()
        model.eval()
        test_loss, correct = 0.0, 0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                correct += int((output.argmax(dim=1) == target).sum())
        print(f"epoch {epoch} test loss {test_loss / 256:.4f} accuracy {correct}/256")
        scheduler.step()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
