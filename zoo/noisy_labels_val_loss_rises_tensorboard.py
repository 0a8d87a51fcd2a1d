"""Classifier that memorizes noisy labels: the validation loss logged to TensorBoard climbs.

An MLP (two hidden layers of 256) classifies 20-d points into 5 classes; 30% of the 600
training labels are flipped to a random class, the 600 validation labels are clean. Adam at
1e-3, no weight decay, no early stopping, 40 epochs of minibatches; after each epoch
`writer.add_scalars("Loss", {"train": ..., "val": ...}, epoch)` and the validation accuracy
go to TensorBoard. The model learns the clean rule in the first epoch (validation accuracy
99%), then spends the rest of the run memorizing the flipped labels: the training loss falls
from 1.16 to 0.03 while the validation loss climbs from its best, 0.35, to 0.55 and the
validation accuracy slides to 84%. The script keeps the last model. Catalog
`train-val-divergence`.

traindoc-expect: train-val-divergence
"""

from __future__ import annotations

import argparse
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
    for epoch in range(args.epochs):
        train_loss, _ = run_epoch(model, train_loader, optimizer)
        val_loss, val_acc = run_epoch(model, val_loader, None)
        writer.add_scalars("Loss", {"train": train_loss, "val": val_loss}, epoch)
        writer.add_scalar("Accuracy/val", val_acc, epoch)
        if epoch % 5 == 0:
            print(f"epoch {epoch}: train {train_loss:.3f}  val {val_loss:.3f}  val acc {val_acc:.3f}")
    writer.close()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
