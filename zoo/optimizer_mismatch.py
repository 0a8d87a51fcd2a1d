"""Fine-tuning that swaps in a new classifier head after building the optimizer: it never trains.

The script builds a backbone + 1000-way head (the "pretrained" layout), creates AdamW over
`model.parameters()`, and only then adapts the model to the 10-class downstream task with
`model.reset_classifier(num_classes)` (the timm-style API), which replaces `model.head` by a
fresh nn.Linear. The optimizer still holds the old 1000-way head's weight and bias, which no
longer take part in the forward pass; the new head receives gradients on every step that no
optimizer ever applies (nor clears: `optimizer.zero_grad()` only touches the optimizer's own
parameters, so its .grad keeps accumulating), and it stays at its random init. The backbone
still trains, so the loss goes down (the backbone learns to work around a random head) and
nothing crashes. Reproduces TrainCheck AC-2665 (optimizer built before the model was changed);
catalog `optimizer-param-mismatch`.

traindoc-expect: optimizer-param-mismatch@0
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IN_DIM = 32
PRETRAIN_CLASSES = 1000


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps")
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Net(nn.Module):
    def __init__(self, in_dim: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.backbone = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.head = nn.Linear(hidden, num_classes)

    def reset_classifier(self, num_classes: int) -> None:
        self.head = nn.Linear(self.hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def make_data(n: int, n_classes: int, gen: torch.Generator):
    centers = torch.randn(n_classes, IN_DIM, generator=gen) * 4.0 / math.sqrt(IN_DIM)
    y = torch.randint(0, n_classes, (n,), generator=gen)
    x = centers[y] + torch.randn(n, IN_DIM, generator=gen)
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    x, y = make_data(4096, args.num_classes, gen)
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(1),
    )

    model = Net(IN_DIM, 128, PRETRAIN_CLASSES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    # adapt the pretrained layout to the downstream task
    if args.num_classes != PRETRAIN_CLASSES:
        model.reset_classifier(args.num_classes)

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
