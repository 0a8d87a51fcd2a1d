"""Classifier whose warmup lambda uses integer division: the LR is exactly 0 for the whole run.

A standard MLP classifier with AdamW (lr 1e-3, weight decay 0.01) and a linear-warmup LambdaLR
written as `lambda step: min(1.0, step // warmup_steps)`. With `//` the factor is 0 until step
== warmup_steps (500 by default), which is longer than the run, so every step uses lr = 0.0:
AdamW's update and its decoupled weight decay are both multiplied by 0, no parameter changes by
a single bit, and the loss only wanders with the batches. Gradients are healthy and finite, the
loop prints the loss, and nothing errors. Catalog `stalled-loss`, `frozen-parameters` and
`tiny-updates`.

traindoc-expect: stalled-loss@0 frozen-parameters@0
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


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-steps", type=int, default=500)
    p.add_argument("--log-every", type=int, default=20)
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


def make_data(n: int, gen: torch.Generator):
    centers = torch.randn(N_CLASSES, IN_DIM, generator=gen) * 4.0 / math.sqrt(IN_DIM)
    y = torch.randint(0, N_CLASSES, (n,), generator=gen)
    x = centers[y] + torch.randn(n, IN_DIM, generator=gen)
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    x, y = make_data(4096, gen)
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(1),
    )

    model = MLP(IN_DIM, 128, N_CLASSES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    warmup_steps = args.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, step // warmup_steps)
    )

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                acc = (logits.argmax(1) == yb).float().mean().item()
                print(f"step {step:4d} | loss {loss.item():.4f} | acc {acc:.3f}"
                      f" | lr {scheduler.get_last_lr()[0]:.2e}")
            step += 1
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
