"""Classifier on noisy labels with early stopping on the validation loss logged to TensorBoard.

The same MLP, data (30% of the training labels flipped), optimizer and
`writer.add_scalars("Loss", {"train": ..., "val": ...}, epoch)` log as
`noisy_labels_val_loss_rises_tensorboard.py`, with the usual guard: the best validation loss
keeps its weights, and 3 epochs without a new best stop the run and restore them. Training
ends before the model has memorized the flipped labels. Healthy twin of
`noisy_labels_val_loss_rises_tensorboard.py`.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import copy
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter


def dataset(n: int, flip: float, gen: torch.Generator) -> TensorDataset:
    centers = torch.randn(5, 20, generator=torch.Generator().manual_seed(3)) * 1.2
    y = torch.randint(0, 5, (n,), generator=gen)
    x = centers[y] + torch.randn(n, 20, generator=gen)
    flipped = torch.rand(n, generator=gen) < flip
    y = torch.where(flipped, torch.randint(0, 5, (n,), generator=gen), y)
    return TensorDataset(x, y)


def run_epoch(model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer | None) -> tuple[float, float]:
    training = optimizer is not None
    model.train(training)
    total = correct = seen = 0.0
    with torch.set_grad_enabled(training):
        for x, y in loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            if optimizer is not None:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            total += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
    return total / seen, correct / seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--flip", type=float, default=0.3)
    parser.add_argument("--logdir", default=None)
    parser.add_argument("--save", default=None, help="write model.state_dict() here")
    args = parser.parse_args()

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    train_loader = DataLoader(dataset(600, args.flip, gen), batch_size=32, shuffle=True)
    val_loader = DataLoader(dataset(600, 0.0, gen), batch_size=200)
    model = nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 5))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    writer = SummaryWriter(args.logdir or tempfile.mkdtemp(prefix="noisy_labels_"))
    best, best_state, patience = float("inf"), None, 0
    for epoch in range(args.epochs):
        train_loss, _ = run_epoch(model, train_loader, optimizer)
        val_loss, val_acc = run_epoch(model, val_loader, None)
        writer.add_scalars("Loss", {"train": train_loss, "val": val_loss}, epoch)
        writer.add_scalar("Accuracy/val", val_acc, epoch)
        print(f"epoch {epoch}: train {train_loss:.3f}  val {val_loss:.3f}  val acc {val_acc:.3f}")
        if val_loss < best:
            best, best_state, patience = val_loss, copy.deepcopy(model.state_dict()), 0
        else:
            patience += 1
            if patience == 3:
                print(f"early stopping at epoch {epoch}: best val loss {best:.3f}")
                break
    model.load_state_dict(best_state)
    writer.close()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
