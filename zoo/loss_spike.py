"""Healthy classifier that hits one corrupted shard batch at step 60: a loss spike, then recovery.

An MLP classifier reads pre-shuffled training shards in order (DataLoader with shuffle=False,
the usual setup for data that was shuffled once when the shards were written). One shard was
written by a buggy export: its 64 rows have labels permuted and features in the wrong unit
(x50). It is the 61st batch of the run, so at step 60 of 120 the loss jumps from ~0.45 to
~186 (~280x its 20-step average); the Adam step on that batch perturbs the model for a few
steps and the loss recovers to its pre-spike level. Nothing else is wrong with the run.
Reproduces seed 003 §11 ("Rollback on Loss Spike: loss > 3 * loss_moving_avg"); catalog
`loss-spike`.

traindoc-expect: loss-spike@60
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IN_DIM = 32
N_CLASSES = 10
SHARD_ROWS = 64


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class MLP(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def load_shards(n_shards: int, bad_shard: int, gen: torch.Generator):
    """Concatenate pre-shuffled shards of SHARD_ROWS rows; one was exported with a bug."""
    centers = torch.randn(N_CLASSES, IN_DIM, generator=gen) * 4.0 / math.sqrt(IN_DIM)
    xs, ys = [], []
    for shard in range(n_shards):
        y = torch.randint(0, N_CLASSES, (SHARD_ROWS,), generator=gen)
        x = centers[y] + torch.randn(SHARD_ROWS, IN_DIM, generator=gen)
        if shard == bad_shard:  # the buggy export: wrong unit, labels out of order
            x = x * 50.0
            y = y[torch.randperm(SHARD_ROWS, generator=gen)]
        xs.append(x)
        ys.append(y)
    return torch.cat(xs), torch.cat(ys)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    x, y = load_shards(n_shards=128, bad_shard=60, gen=gen)
    loader = DataLoader(
        TensorDataset(x, y), batch_size=args.batch_size, shuffle=False, num_workers=0
    )

    model = MLP(IN_DIM, 128, N_CLASSES)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                acc = (logits.argmax(1) == yb).float().mean().item()
                print(f"step {step:4d} | loss {loss.item():.4f} | acc {acc:.3f}")
            step += 1
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
