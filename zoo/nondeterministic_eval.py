"""Residual MLP whose blocks call F.dropout without training=self.training: eval is random.

Each residual block applies dropout with the functional API, `F.dropout(h, p=self.dropout)`,
the way it was copied from a research codebase. `F.dropout` defaults to `training=True`, so
`model.eval()` does not turn it off: the validation pass every 30 steps (done properly with
`model.eval()` and `torch.no_grad()`) still drops 20% of the hidden units, and two evaluations
of the same checkpoint on the same data give different numbers. Reproduces the pattern of
TrainCheck TF-33844 (Hugging Face Transformers PR 33844: an attention dropout that ignored
`self.training`); catalog `nondeterministic-eval`.

traindoc-expect: nondeterministic-eval@29
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
    p.add_argument("--steps", type=int, default=90, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=30)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class ResidualBlock(nn.Module):
    def __init__(self, dim: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(self.norm(x)))
        h = F.dropout(h, p=self.dropout)
        return x + self.fc2(h)


class ResidualMLP(nn.Module):
    def __init__(self, in_dim: int, dim: int, n_classes: int, depth: int = 2, dropout: float = 0.2) -> None:
        super().__init__()
        self.embed = nn.Linear(in_dim, dim)
        self.blocks = nn.ModuleList(ResidualBlock(dim, dropout) for _ in range(depth))
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_data(n: int):
    centers = torch.randn(N_CLASSES, IN_DIM) * 3.0 / math.sqrt(IN_DIM)
    y = torch.randint(0, N_CLASSES, (n,))
    return centers[y] + torch.randn(n, IN_DIM), y


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    logits = model(x)
    model.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(dim=1) == y).float().mean().item()


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x, y = make_data(2560)
    loader = DataLoader(TensorDataset(x[:2048], y[:2048]), batch_size=args.batch_size,
                        shuffle=True, drop_last=True)
    x_val, y_val = x[2048:], y[2048:]

    model = ResidualMLP(IN_DIM, 64, N_CLASSES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.eval_every == 0:
                val_loss, val_acc = evaluate(model, x_val, y_val)
                print(f"step {step:4d} | loss {loss.item():.4f} | val loss {val_loss:.4f} | val acc {val_acc:.3f}")
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
