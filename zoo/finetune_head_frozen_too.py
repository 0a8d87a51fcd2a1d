"""Fine-tuning where the freeze loop also freezes the new head: optimizer.step() never changes anything.

A torchvision-style transfer-learning script (PyTorch forum thread 84911, TrainCheck's
PT-Forum-84911). It replaces the classifier of a small "pretrained" ResNet-like network with a
fresh `nn.Linear`, *then* runs the usual freeze loop over `model.parameters()`, which now also
freezes the new head, and builds SGD from `model.fc.parameters()` only. `backward()` then raises
"element 0 of tensors does not require grad", which the script "fixes" the way forum answers
suggest, with `loss.requires_grad_(True)`. From then on the loop runs: every `step()` changes
nothing, but the BatchNorm layers are in train mode and their running statistics keep moving, so
the validation accuracy wiggles from epoch to epoch and looks like noisy training.

traindoc-expect: constant-loss@0 no-gradient@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class TinyResNet(nn.Module):
    """Stem, two stages, global pool and `fc`, the attribute names torchvision's ResNets use."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = conv_bn(3, 8)
        self.layer1 = conv_bn(8, 16, stride=2)
        self.layer2 = conv_bn(16, 16, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make_data(n: int, classes: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    # each class is a colour tint plus noise: learnable from pooled features by a linear head
    tint = torch.randn(classes, 3, 1, 1, generator=torch.Generator().manual_seed(0))
    x = tint[y] + 0.8 * torch.randn(n, 3, 12, 12, generator=g)
    return TensorDataset(x, y)


def main(fixed: bool = False) -> None:
    """``fixed``: freeze the backbone before replacing the head (the healthy twin)."""
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)

    model = TinyResNet(num_classes=10)  # stands in for models.resnet18(weights=...)
    num_classes = 4
    if fixed:
        for param in model.parameters():
            param.requires_grad = False
        model.fc = nn.Linear(model.fc.in_features, num_classes)
    else:
        model.fc = nn.Linear(model.fc.in_features, num_classes)
        for param in model.parameters():  # meant for the backbone; the new fc is in there too
            param.requires_grad = False

    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.fc.parameters(), lr=args.lr, momentum=0.9)
    train = DataLoader(make_data(512, num_classes, 1), batch_size=32, shuffle=True)
    val = DataLoader(make_data(128, num_classes, 2), batch_size=64)

    for epoch in range(args.epochs):
        model.train()
        running = 0.0
        for inputs, labels in train:
            optimizer.zero_grad()
            loss = criterion(model(inputs), labels)
            if not loss.requires_grad:
                loss.requires_grad_(True)  # "element 0 of tensors does not require grad"
            loss.backward()
            optimizer.step()
            running += loss.item() * inputs.size(0)
        model.eval()
        correct = 0
        with torch.no_grad():
            for inputs, labels in val:
                correct += (model(inputs).argmax(1) == labels).sum().item()
        print(f"epoch {epoch} train loss {running / len(train.dataset):.4f} val acc {correct / len(val.dataset):.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
