"""Healthy small CNN with BatchNorm: SGD + momentum, OneCycleLR per batch, periodic eval.

The classic "CIFAR-style" image classifier loop, shrunk to 1x16x16 synthetic images in 10
classes: conv -> BatchNorm2d -> ReLU blocks, SGD with Nesterov momentum 0.9 and weight decay,
OneCycleLR stepped once per batch right after optimizer.step(), and an evaluation pass every
50 steps done properly (model.eval() + torch.no_grad(), then back to model.train()).

traindoc-expect:
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-lr", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    # No conv bias: the BatchNorm that follows has its own shift.
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class SmallCNN(nn.Module):
    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 8),
            nn.MaxPool2d(2),  # 8x8
            conv_bn(8, 16),
            nn.MaxPool2d(2),  # 4x4
            conv_bn(16, 32),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = self.pool(x).flatten(1)
        return self.fc(x)


def make_images(n: int, n_classes: int = 10, size: int = 16):
    """Each class is a random 5x5 stroke pattern placed at a random position, plus noise."""
    templates = (torch.rand(n_classes, 5, 5) < 0.4).float()
    y = torch.randint(0, n_classes, (n,))
    x = 0.5 * torch.randn(n, 1, size, size)
    rows = torch.randint(0, size - 5 + 1, (n,))
    cols = torch.randint(0, size - 5 + 1, (n,))
    for i in range(n):
        r, c = int(rows[i]), int(cols[i])
        x[i, 0, r : r + 5, c : c + 5] += 2.0 * templates[y[i]]
    return x, y


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader) -> tuple[float, float]:
    model.eval()
    total, loss_sum, correct = 0, 0.0, 0
    for xb, yb in loader:
        logits = model(xb)
        loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(dim=1) == yb).sum().item()
        total += yb.numel()
    model.train()
    return loss_sum / total, correct / total


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    x, y = make_images(2560)
    train_loader = DataLoader(
        TensorDataset(x[:2048], y[:2048]),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
    )
    val_loader = DataLoader(TensorDataset(x[2048:], y[2048:]), batch_size=256, num_workers=0)

    model = SmallCNN()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=args.max_lr, momentum=0.9, nesterov=True,
        weight_decay=args.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.max_lr, total_steps=args.steps, pct_start=0.25
    )

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in train_loader:
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1

            if step % args.log_every == 0 or step == 1:
                lr = scheduler.get_last_lr()[0]
                print(f"step {step:4d} | loss {loss.item():.4f} | lr {lr:.4f}")
            if step % args.eval_every == 0 or step == args.steps:
                val_loss, val_acc = evaluate(model, val_loader)
                print(f"step {step:4d} | val loss {val_loss:.4f} | val acc {val_acc:.3f}")
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
