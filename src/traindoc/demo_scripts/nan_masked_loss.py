"""Sensor regression whose NaN guard swaps a NaN loss for a constant and trains on.

A 16-channel sensor log is regressed onto a target with an MLP. One channel drops out once per
polling cycle and logs NaN, so every third batch (starting with the very first one) holds a row
with a NaN feature, the model's output for that row is NaN, and so is the batch loss. Instead of
fixing the data, the loop "guards" the step with `if torch.isnan(loss): loss = torch.tensor(1.0,
requires_grad=True)`: the value handed to backward is finite but no longer depends on any
parameter, so a third of the steps silently train on nothing and the failure never shows.
Reproduces seed 000 §3 (NaN masking); catalog `masked-nonfinite` and `constant-loss`.

traindoc-expect: masked-nonfinite@0 constant-loss@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

N_CHANNELS = 16
BAD_CHANNEL = 5  # the flaky sensor


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class SensorRegressor(nn.Module):
    def __init__(self, n_in: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def load_sensor_log(
    n_rows: int, cycle: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic sensor log. The bad channel reports NaN once per polling cycle of `cycle` rows."""
    x = torch.randn(n_rows, N_CHANNELS, generator=gen)
    w = torch.randn(N_CHANNELS, generator=gen) / N_CHANNELS**0.5
    y = torch.tanh(x @ w) * 2.0 + 0.5 * x[:, 0] * x[:, 1] + 0.1 * torch.randn(n_rows, generator=gen)
    dropouts = torch.arange(7, n_rows, cycle)  # sensor dropout: one reading per cycle is NaN
    x[dropouts, BAD_CHANNEL] = float("nan")
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    x, y = load_sensor_log(30 * args.batch_size, cycle=3 * args.batch_size, gen=gen)
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=args.batch_size,
        shuffle=False,
        drop_last=True,
        num_workers=0,
    )

    model = SensorRegressor(N_CHANNELS, args.hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)

    model.train()
    step = 0
    skipped = 0
    while step < args.steps:
        for xb, yb in loader:
            pred = model(xb)
            loss = F.mse_loss(pred, yb)
            if torch.isnan(loss):
                # a bad sensor reading slipped into the batch: don't let it kill the run
                loss = torch.tensor(1.0, requires_grad=True)
                skipped += 1

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                print(f"step {step:4d} | loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break

    print(f"done: {step} steps ({skipped} batches had a NaN loss)")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
