"""MNIST-example-style CNN trained for 40 epochs on 1,000 images with noisy labels: it overfits.

The loop is the classic example's: `train(args, model, device, train_loader, optimizer,
epoch)` printing `Train Epoch: ... Loss: ...` every few batches, `test(model, device,
test_loader)` summing `F.nll_loss(output, target, reduction="sum")` under `torch.no_grad()`
and printing `Test set: Average loss: X, Accuracy: N/M (P%)`, `log_softmax` outputs,
Adadelta with `StepLR`. The data are 12x12 one-channel "digits" (a fixed pattern per class plus
noise); the training set is 1,000 images, a quarter of their labels wrong, and there is no
dropout. By epoch 4 the network has learned the patterns (average test loss 0.41); then it
memorizes the wrong labels: its training loss falls towards 1e-4 while the average test loss
climbs to 0.69. The script prints no validation loss under that name (it calls it the test
set's average loss); traindoc reads the evaluation's loss from its `nll_loss` calls under
`no_grad`. Catalog `train-val-divergence`.

traindoc-expect: train-val-divergence
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1)
        self.conv2 = nn.Conv2d(16, 32, 3, 1)
        self.fc1 = nn.Linear(32 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


def digits(n: int, noisy: float, gen: torch.Generator) -> TensorDataset:
    patterns = torch.randn(10, 1, 12, 12, generator=torch.Generator().manual_seed(5))
    target = torch.randint(0, 10, (n,), generator=gen)
    data = patterns[target] + 1.5 * torch.randn(n, 1, 12, 12, generator=gen)
    wrong = torch.rand(n, generator=gen) < noisy
    target = torch.where(wrong, torch.randint(0, 10, (n,), generator=gen), target)
    return TensorDataset(data, target)


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0 and epoch % 5 == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)} "
                  f"({100.0 * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}")


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(test_loader.dataset)} "
          f"({100.0 * correct / len(test_loader.dataset):.0f}%)\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--test-batch-size", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train-size", type=int, default=1000)
    parser.add_argument("--log-interval", type=int, default=5)
    parser.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    gen = torch.Generator().manual_seed(0)
    train_loader = DataLoader(digits(args.train_size, 0.25, gen), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(digits(1000, 0.0, gen), batch_size=args.test_batch_size)
    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
