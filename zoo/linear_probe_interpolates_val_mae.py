"""Linear probe with as many features as training examples: the validation MAE explodes.

A regression head is fitted on frozen 60-d embeddings of 60 labelled examples (targets with
measurement noise), full batch, Adam, no weight decay, for a fixed 4,000 steps; every 20 steps
a `csv.DictWriter` row (`step, train_mse, val_mae`) goes to `probe_metrics.csv`. With as many
weights as examples the head can fit the noise exactly, and gradient descent gets there
through the directions the 60 examples barely constrain: the training MSE falls towards 0
while the validation MAE, best near 0.6 after about 80 steps, climbs to about 4.6, seven times
its best. Nothing in the training curve shows it; the probe kept is the last one.
Catalog `metric-divergence` (the error metric logged under the script's own name).

traindoc-expect: metric-divergence
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import tempfile

import torch

N_EXAMPLES = 60
DIM = 60
STEPS = 4000
EVAL_EVERY = 20


def frozen_embeddings(n: int) -> torch.Tensor:
    return torch.randn(n, DIM)


def main(out_dir: str, save: str | None) -> None:
    torch.manual_seed(0)
    train_x, val_x = frozen_embeddings(N_EXAMPLES), frozen_embeddings(500)
    w_true = torch.randn(DIM) / math.sqrt(DIM)
    train_y = train_x @ w_true + 0.5 * torch.randn(N_EXAMPLES)
    val_y = val_x @ w_true

    head = torch.nn.Linear(DIM, 1, bias=False)
    torch.nn.init.zeros_(head.weight)
    optimizer = torch.optim.Adam(head.parameters(), lr=2e-2)
    with open(os.path.join(out_dir, "probe_metrics.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "train_mse", "val_mae"])
        writer.writeheader()
        for step in range(STEPS):
            loss = torch.nn.functional.mse_loss(head(train_x).squeeze(1), train_y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % EVAL_EVERY == 0:
                with torch.no_grad():
                    val_mae = (head(val_x).squeeze(1) - val_y).abs().mean().item()
                writer.writerow({"step": step, "train_mse": loss.item(), "val_mae": val_mae})
                if step % 500 == 0:
                    print(f"step {step}: train mse {loss.item():.5f}")
    if save:
        torch.save(head.state_dict(), save)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=None)
    parser.add_argument("--save", default=None, help="write the head's state_dict() here")
    args = parser.parse_args()
    main(args.out_dir or tempfile.mkdtemp(prefix="probe_"), args.save)
