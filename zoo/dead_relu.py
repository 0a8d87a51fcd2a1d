"""MLP trained with Adam at an SGD-sized learning rate: most first-layer ReLUs die early.

A 3-layer MLP (nn.Linear + nn.ReLU modules, width 256) classifies 64-d feature vectors with
Adam at `--lr 3e-2`, a value carried over from an SGD config. Adam's first steps move every
weight by ~lr regardless of the gradient's scale, which throws the first layer's pre-activations
far negative for most units on the whole input distribution; once a ReLU unit outputs 0 for
every input its gradient is 0 and it never comes back. The task is easy, so the surviving units
still fit it and the loss goes down: nothing looks wrong, but most of the first layer's width is
dead (never positive on any of 20 consecutive batches). Catalog `dead-relu`.

traindoc-expect: dead-relu@15
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IN_DIM = 64
N_CLASSES = 10


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class MLP(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = nn.ReLU()
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act2(self.fc2(self.act1(self.fc1(x)))))


def make_data(n: int, gen: torch.Generator):
    """Intensity features in [0, 1]: noisy class prototypes, clipped; 10% label noise."""
    prototypes = torch.rand(N_CLASSES, IN_DIM, generator=gen)
    y = torch.randint(0, N_CLASSES, (n,), generator=gen)
    x = (prototypes[y] + 0.3 * torch.randn(n, IN_DIM, generator=gen)).clamp(0.0, 1.0)
    flip = torch.rand(n, generator=gen) < 0.1
    y[flip] = torch.randint(0, N_CLASSES, (int(flip.sum()),), generator=gen)
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

    model = MLP(IN_DIM, args.hidden, N_CLASSES)
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
