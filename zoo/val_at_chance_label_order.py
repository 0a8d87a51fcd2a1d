"""Species classifier whose validation labels are numbered in another order than its training labels.

Records arrive as (measurements, species name). The training loader numbers the species in
the order it first meets them (`dict.fromkeys(names)`), the validation loader, written
separately, numbers them alphabetically (`sorted(set(names))`), so nine of the ten species
get a different id in the two sets (only iris keeps its id 2). The model learns the training set to 100% accuracy and is
scored against renumbered validation labels: val_acc sits at 10%, chance for ten balanced
classes, epoch after epoch. No logger, no DataLoader: the loop batches by hand with
`torch.randperm` and only prints its metrics (`epoch 3 val_acc 0.100`). Catalog `val-at-chance`.

traindoc-expect: val-at-chance@96
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

SPECIES = ("iris", "tulip", "daisy", "rose", "lily", "orchid", "poppy", "aster", "peony", "violet")
N_FEATURES = 24


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def read_records(n: int, seed: int) -> tuple[torch.Tensor, list[str]]:
    """n measurements of the ten species (balanced), in a shuffled order."""
    gen = torch.Generator().manual_seed(seed)
    centres = 2.0 * torch.randn(len(SPECIES), N_FEATURES, generator=torch.Generator().manual_seed(7))
    kind = (torch.arange(n) % len(SPECIES))[torch.randperm(n, generator=gen)]
    x = centres[kind] + torch.randn(n, N_FEATURES, generator=gen)
    return x, [SPECIES[i] for i in kind.tolist()]


def train_labels(names: list[str]) -> tuple[torch.Tensor, dict[str, int]]:
    vocab = {name: i for i, name in enumerate(dict.fromkeys(names))}  # first-seen order
    return torch.tensor([vocab[n] for n in names]), vocab


def val_labels(names: list[str]) -> torch.Tensor:
    vocab = {name: i for i, name in enumerate(sorted(set(names)))}  # alphabetical order
    return torch.tensor([vocab[n] for n in names])


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x_train, train_names = read_records(2048, seed=1)
    y_train, vocab = train_labels(train_names)
    x_val, val_names = read_records(1000, seed=2)
    y_val = val_labels(val_names)

    model = nn.Sequential(nn.Linear(N_FEATURES, 64), nn.ReLU(), nn.Linear(64, len(vocab)))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x_train))
        total_loss = correct = 0.0
        for i in range(0, len(order), args.batch_size):
            idx = order[i:i + args.batch_size]
            logits = model(x_train[idx])
            loss = criterion(logits, y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * len(idx)
            correct += (logits.argmax(1) == y_train[idx]).sum().item()
        print(f"epoch {epoch} train_loss {total_loss / len(order):.4f} train_acc {correct / len(order):.3f}")

        model.eval()
        hits = val_loss = 0.0
        with torch.no_grad():
            for i in range(0, len(x_val), 250):
                logits = model(x_val[i:i + 250])
                val_loss += criterion(logits, y_val[i:i + 250]).item() * len(logits)
                hits += (logits.argmax(1) == y_val[i:i + 250]).sum().item()
        acc = hits / len(x_val)
        print(f"epoch {epoch} val_loss {val_loss / len(x_val):.3f} val_acc {acc:.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
