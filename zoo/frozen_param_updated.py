"""Fine-tuning that freezes the backbone with requires_grad_(False) mid-run; SGD keeps moving it.

A classifier (MLP backbone + linear head) is fine-tuned end to end with SGD (momentum 0.9,
weight decay 1e-4) for `--freeze-at` steps (10), then the backbone is frozen with
`p.requires_grad_(False)` to train only the head, without rebuilding the optimizer. The loop
clears gradients with `optimizer.zero_grad(set_to_none=False)`, so the frozen parameters keep a
zero-filled .grad instead of None; SGD still steps them: weight decay adds 1e-4 * w to the zero
gradient and the momentum buffer from the first 10 steps keeps pushing. The "frozen" backbone
keeps changing for the rest of the run. Reproduces TrainCheck MMPretrain-702; catalog
`frozen-param-updated`.

traindoc-expect: frozen-param-updated@10
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
    p.add_argument("--steps", type=int, default=120, help="optimizer steps")
    p.add_argument("--freeze-at", type=int, default=10, help="freeze the backbone at this step")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Classifier(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


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

    model = Classifier(IN_DIM, 128, N_CLASSES)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
    )

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            if step == args.freeze_at:
                # backbone is adapted enough: train only the head from here on
                for p in model.backbone.parameters():
                    p.requires_grad_(False)
                print(f"step {step:4d} | backbone frozen")

            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            optimizer.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                print(f"step {step:4d} | loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
