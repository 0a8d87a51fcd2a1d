"""Linear probe fitted on ten times as many examples as features: the validation MAE settles.

The same head, data, optimizer, schedule and `csv.DictWriter` log (`step, train_mse, val_mae`)
as `linear_probe_interpolates_val_mae.py`, but with 600 labelled examples for its 60 weights:
the head cannot fit the noise, so the training MSE levels off near the noise's variance (0.25) and
the validation MAE falls to about 0.13 and stays there. Healthy twin of
`linear_probe_interpolates_val_mae.py`.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import tempfile

import torch

N_EXAMPLES = 600
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
