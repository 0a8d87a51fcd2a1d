"""A tutorial-style classifier whose validation leaves the network in eval mode for good.

The shape of many course scripts: ``net.train()`` once before the epoch loop, then each epoch
trains over the loader and validates inline with ``net.eval()`` (and no ``torch.no_grad()``,
the outputs detached by hand). Nothing calls ``net.train()`` again, so from the second epoch on
every training step runs with Dropout off and BatchNorm normalizing with running statistics it
no longer updates. Synthetic tabular data, 12 features in 4 classes, an MLP with BatchNorm1d
and Dropout(0.3); 20 steps an epoch.

traindoc-expect: trained-in-eval-mode@25
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--save", type=str, default=None, help="write net.state_dict() here")
    return p.parse_args()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(12, 64)
        self.bn1 = nn.BatchNorm1d(64)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(F.relu(self.bn1(self.fc1(x)))))


args = get_args()
torch.manual_seed(0)
centers = 1.5 * torch.randn(4, 12)
labels = torch.randint(0, 4, (800,))
features = centers[labels] + torch.randn(800, 12)
train_loader = DataLoader(TensorDataset(features[:640], labels[:640]), batch_size=args.batch_size, shuffle=True)
valid_loader = DataLoader(TensorDataset(features[640:], labels[640:]), batch_size=80)

net = Net()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

net.train()
for epoch in range(args.epochs):
    loss_sum = 0.0
    for i, (inputs, targets) in enumerate(train_loader):
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item()
    print(f"epoch {epoch} train loss {loss_sum / len(train_loader):.4f}")

    # validation
    net.eval()
    correct = total = 0
    for inputs, targets in valid_loader:
        outputs = net(inputs)
        outputs.detach_()
        correct += (outputs.argmax(1) == targets).sum().item()
        total += targets.numel()
    print(f"epoch {epoch} valid acc {correct / total:.3f}")

if args.save:
    torch.save(net.state_dict(), args.save)
