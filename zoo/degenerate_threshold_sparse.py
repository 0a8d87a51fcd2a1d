"""Rare-event classifier (3% positives) whose F1 at threshold 0.5 is 0 every epoch while it learns.

Sensor windows are labelled as faults about 3% of the time; a fault's probability rises with
a hidden combination of the readings but never gets near one half, so a well-calibrated model
(trained with `nn.BCEWithLogitsLoss`, the default unweighted loss) scores every window below
0.5. The script scores validation at the fixed cut 0.5, with the model in `eval()` but without
`no_grad` (the loss is only read with `.item()`), and prints `f1=0.000` every epoch while
both losses fall (validation 0.26 -> 0.12; the highest score stays below 0.38). Nothing is
logged but the printed line. Catalog `degenerate-threshold` (seed 001's F1 of 0 at threshold 0.5).

traindoc-expect: degenerate-threshold@60
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

N_FEATURES = 16


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--threshold", type=float, default=0.5)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def sensor_windows(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Readings and fault labels: P(fault) = sigmoid(-4 + x @ w), about 3% on average, at most 0.37."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(N_FEATURES, generator=torch.Generator().manual_seed(11))
    w = w / w.norm()
    x = torch.randn(n, N_FEATURES, generator=gen)
    p = torch.sigmoid(-4.0 + x @ w)
    y = (torch.rand(n, generator=gen) < p).float()
    return x, y.unsqueeze(1)


def f1_at(scores: torch.Tensor, y: torch.Tensor, threshold: float) -> float:
    pred = scores > threshold
    tp = (pred & (y > 0.5)).sum().item()
    fp = (pred & (y < 0.5)).sum().item()
    fn = (~pred & (y > 0.5)).sum().item()
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x_train, y_train = sensor_windows(7680, seed=1)
    x_val, y_val = sensor_windows(4000, seed=2)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(N_FEATURES, 32), nn.Tanh(), nn.Linear(32, 1))
    criterion = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        model.train()
        running = 0.0
        for xb, yb in loader:
            loss = criterion(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item()

        model.eval()
        logits = model(x_val)
        val_loss = criterion(logits, y_val).item()
        f1 = f1_at(torch.sigmoid(logits.detach()), y_val, args.threshold)
        print(f"epoch {epoch} loss={running / len(loader):.4f} val_loss={val_loss:.4f} f1={f1:.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
