"""An Inception-style classifier whose 5x5 branch builds `nn.BatchNorm2d(n5x5, n5x5)`: a channel count as eps.

Written as the CIFAR model zoos of the kind of weiaicunzai/pytorch-cifar100 are: the model in
classes (an ``Inception`` module taking its branch widths as arguments, a small GoogLeNet
around it), a ``train(epoch)`` function over a DataLoader with ``net.train()``, a linear
warm-up scheduler stepped every iteration of the first epoch, ``eval_training`` under
``torch.no_grad()`` with ``net.eval()`` after each epoch, SGD with momentum and weight decay.
The data are 3x16x16 images of ten classes, each a coloured blob at its own place.

In the 5x5 branch, a copy-paste repeated the width: ``nn.BatchNorm2d(n5x5, n5x5)``. The second
argument is ``eps``, so that layer divides by sqrt(var + 8): its input's variance is below
1 (0.1 measured), and it shrinks the branch's output about ninefold instead of normalizing it. The
network still learns through its other branches, so accuracy looks fine and nothing points
at the branch.

traindoc-expect: norm-eps-too-large@0
"""

import argparse

import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader, TensorDataset


class Inception(nn.Module):
    def __init__(self, input_channels, n1x1, n3x3_reduce, n3x3, n5x5_reduce, n5x5, pool_proj):
        super().__init__()
        self.b1 = nn.Sequential(
            nn.Conv2d(input_channels, n1x1, kernel_size=1), nn.BatchNorm2d(n1x1), nn.ReLU(inplace=True))
        self.b2 = nn.Sequential(
            nn.Conv2d(input_channels, n3x3_reduce, kernel_size=1), nn.BatchNorm2d(n3x3_reduce), nn.ReLU(inplace=True),
            nn.Conv2d(n3x3_reduce, n3x3, kernel_size=3, padding=1), nn.BatchNorm2d(n3x3), nn.ReLU(inplace=True))
        self.b3 = nn.Sequential(
            nn.Conv2d(input_channels, n5x5_reduce, kernel_size=1), nn.BatchNorm2d(n5x5_reduce), nn.ReLU(inplace=True),
            nn.Conv2d(n5x5_reduce, n5x5, kernel_size=3, padding=1), nn.BatchNorm2d(n5x5, n5x5), nn.ReLU(inplace=True),
            nn.Conv2d(n5x5, n5x5, kernel_size=3, padding=1), nn.BatchNorm2d(n5x5), nn.ReLU(inplace=True))
        self.b4 = nn.Sequential(
            nn.MaxPool2d(3, stride=1, padding=1),
            nn.Conv2d(input_channels, pool_proj, kernel_size=1), nn.BatchNorm2d(pool_proj), nn.ReLU(inplace=True))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], dim=1)


class GoogleNet(nn.Module):
    def __init__(self, num_class=10):
        super().__init__()
        self.prelayer = nn.Sequential(nn.Conv2d(3, 16, kernel_size=3, padding=1, bias=False),
                                      nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.a3 = Inception(16, 8, 8, 16, 4, 8, 8)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.b3 = Inception(40, 16, 8, 16, 4, 8, 8)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.linear = nn.Linear(48, num_class)

    def forward(self, x):
        x = self.prelayer(x)
        x = self.maxpool(self.a3(x))
        x = self.b3(x)
        return self.linear(self.avgpool(x).flatten(1))


class WarmUpLR(LRScheduler):
    def __init__(self, optimizer, total_iters, last_epoch=-1):
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base_lr * self.last_epoch / (self.total_iters + 1e-8) for base_lr in self.base_lrs]


def blobs(n, generator):
    labels = torch.randint(0, 10, (n,), generator=generator)
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    cy, cx = 3 + (labels // 5) * 9, 2 + (labels % 5) * 3
    d2 = (yy[None] - cy[:, None, None]) ** 2 + (xx[None] - cx[:, None, None]) ** 2
    colour = torch.stack([(labels % 3 == k).float() for k in range(3)], 1)
    images = colour[:, :, None, None] * torch.exp(-d2 / 6)[:, None] + 0.3 * torch.randn(n, 3, 16, 16, generator=generator)
    return TensorDataset(images, labels)


def train(epoch):
    net.train()
    for batch_index, (images, labels) in enumerate(training_loader):
        optimizer.zero_grad()
        outputs = net(images)
        loss = loss_function(outputs, labels)
        loss.backward()
        optimizer.step()
        if batch_index % 10 == 0:
            print(f"Training Epoch: {epoch} [{batch_index * args.b + len(images)}/{len(training_loader.dataset)}]"
                  f"\tLoss: {loss.item():0.4f}\tLR: {optimizer.param_groups[0]['lr']:0.6f}")
        if epoch <= args.warm:
            warmup_scheduler.step()


@torch.no_grad()
def eval_training(epoch):
    net.eval()
    correct = 0.0
    for images, labels in test_loader:
        correct += net(images).argmax(1).eq(labels).sum()
    print(f"Test set: Epoch: {epoch}, Accuracy: {correct.float() / len(test_loader.dataset):.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-b", type=int, default=32, help="batch size")
    parser.add_argument("-warm", type=int, default=1, help="warm up epochs")
    parser.add_argument("-lr", type=float, default=0.05)
    parser.add_argument("-epochs", type=int, default=3)
    parser.add_argument("--save", type=str, default=None)
    args = parser.parse_args()

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    training_loader = DataLoader(blobs(960, gen), batch_size=args.b, shuffle=True, generator=gen)
    test_loader = DataLoader(blobs(200, gen), batch_size=100)
    net = GoogleNet()
    loss_function = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    warmup_scheduler = WarmUpLR(optimizer, len(training_loader) * args.warm)
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        eval_training(epoch)
    if args.save:
        torch.save(net.state_dict(), args.save)
