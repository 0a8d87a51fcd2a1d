"""Classifier validated with an EMA copy whose BatchNorm statistics are never updated.

A 10-class MLP with BatchNorm trains on raw, unnormalized features (pixel-like values around
120 with class differences of a few units; the network's first BatchNorm normalizes them). An EMA of the weights is kept for
validation, as `--use-ema` does in seed 004's train.py, but the EMA update loops over
`parameters()` only: the copy's BatchNorm `running_mean`/`running_var` keep their initial 0/1.
In eval mode the copy therefore feeds activations in the hundreds through its layers and predicts
the same class for every input, so validation accuracy sits at exactly 10% (chance for 10
balanced classes) while training accuracy reaches 100%. Accuracies are logged to
TensorBoard with `SummaryWriter.add_scalar` (to a CSV when tensorboard is not installed).
Reproduces seed 004 ("Validation accuracy stuck at 0.10%": the EMA model had broken batch
normalization statistics); catalog `val-at-chance` and `stale-bn-eval`.

traindoc-expect: val-at-chance stale-bn-eval
"""

from __future__ import annotations

import argparse
import copy
import csv
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

try:
    from torch.utils.tensorboard import SummaryWriter
except ImportError:  # tensorboard is optional: fall back to a CSV log
    SummaryWriter = None

N_CLASSES = 10
IN_DIM = 64


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--ema-decay", type=float, default=0.9)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--log-dir", type=str, default=None, help="TensorBoard folder (default: a temp folder)")
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_data(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Class prototypes plus noise, on a 0-255 pixel scale (never standardized)."""
    protos = torch.randn(N_CLASSES, IN_DIM, generator=torch.Generator().manual_seed(123))
    y = torch.arange(n) % N_CLASSES
    x = 120.0 + 2.0 * (protos[y] + 0.8 * torch.randn(n, IN_DIM, generator=gen))
    return x, y


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.BatchNorm1d(IN_DIM), nn.Linear(IN_DIM, 128), nn.BatchNorm1d(128), nn.ReLU(),
            nn.Linear(128, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, N_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@torch.no_grad()
def update_ema(ema: nn.Module, model: nn.Module, decay: float) -> None:
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(decay).add_(p, alpha=1 - decay)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    correct = total = 0
    for xb, yb in loader:
        correct += (model(xb).argmax(1) == yb).sum().item()
        total += len(yb)
    return correct / total


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x_train, y_train = make_data(4096, gen)
    x_val, y_val = make_data(1000, gen)
    train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(TensorDataset(x_val, y_val), batch_size=500)

    model = Net()
    ema = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="val_at_chance_")
    writer = SummaryWriter(log_dir) if SummaryWriter is not None else None
    csv_file = None
    if writer is None:
        csv_file = open(os.path.join(log_dir, "metrics.csv"), "w", newline="")
        csv_log = csv.writer(csv_file)
        csv_log.writerow(["step", "train_acc", "val_acc"])

    step = 0
    correct = seen = 0
    while step < args.steps:
        for xb, yb in train_loader:
            model.train()
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            update_ema(ema, model, args.ema_decay)
            correct += (logits.argmax(1) == yb).sum().item()
            seen += len(yb)
            step += 1
            if step % args.eval_every == 0:
                train_acc, val_acc = 100.0 * correct / seen, 100.0 * evaluate(ema, val_loader)
                correct = seen = 0
                if writer is not None:
                    writer.add_scalar("Loss/train", loss.item(), step)
                    writer.add_scalar("Accuracy/train", train_acc, step)
                    writer.add_scalar("Accuracy/val", val_acc, step)
                else:
                    csv_log.writerow([step, train_acc, val_acc])
                print(f"step {step:4d} | loss {loss.item():.4f} | train {train_acc:.2f}% | val {val_acc:.2f}%")
            if step >= args.steps:
                break

    if writer is not None:
        writer.close()
    if csv_file is not None:
        csv_file.close()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
