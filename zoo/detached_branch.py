"""Multi-task classifier whose auxiliary head is detached after the head: it never learns.

A shared MLP backbone feeds a 10-class head and an auxiliary regression head (predicting a
continuous "difficulty" score). The author wanted the auxiliary loss not to disturb the
backbone and wrote `aux = model.aux_head(feats).detach()` instead of
`model.aux_head(feats.detach())`. The auxiliary loss is still added to the total and printed,
the main task trains normally, but the auxiliary head's weight and bias, which the optimizer
holds, never receive a gradient (their .grad stays None); the auxiliary loss only drifts as
the backbone changes under it.
Reproduces seed 003's gradient health check ("WARNING: {name} has no gradient!"); catalog
`no-gradient`.

traindoc-expect: no-gradient@0
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
    p.add_argument("--aux-weight", type=float, default=0.5)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class MultiTaskNet(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.cls_head = nn.Linear(hidden, n_classes)
        self.aux_head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cls_head(self.backbone(x))


def make_data(n: int, gen: torch.Generator):
    centers = torch.randn(N_CLASSES, IN_DIM, generator=gen) * 4.0 / math.sqrt(IN_DIM)
    y = torch.randint(0, N_CLASSES, (n,), generator=gen)
    x = centers[y] + torch.randn(n, IN_DIM, generator=gen)
    # auxiliary target: how far the sample sits from its class centre
    difficulty = (x - centers[y]).norm(dim=1) / math.sqrt(IN_DIM)
    return x, y, difficulty


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    x, y, difficulty = make_data(4096, gen)
    loader = DataLoader(
        TensorDataset(x, y, difficulty),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(1),
    )

    model = MultiTaskNet(IN_DIM, args.hidden, N_CLASSES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb, db in loader:
            feats = model.backbone(xb)
            logits = model.cls_head(feats)
            # the auxiliary task must not push the backbone around: stop its gradient
            aux = model.aux_head(feats).detach().squeeze(-1)
            loss_cls = F.cross_entropy(logits, yb)
            loss_aux = F.mse_loss(aux, db)
            loss = loss_cls + args.aux_weight * loss_aux

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                acc = (logits.argmax(1) == yb).float().mean().item()
                print(f"step {step:4d} | loss {loss.item():.4f} | cls {loss_cls.item():.4f}"
                      f" | aux {loss_aux.item():.4f} | acc {acc:.3f}")
            step += 1
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
