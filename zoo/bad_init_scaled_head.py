"""10-class classifier whose output layer is initialised with std 5: first loss far above ln(10).

An MLP classifier with a custom `init_weights`: xavier for the backbone and
`nn.init.normal_(model.head.weight, std=args.head_init_std)` for the output layer, where the
default head std is 5.0 instead of the intended 0.05 (a dropped `e-2`). The initial logits are
then tens of units apart, the softmax is saturated on an arbitrary class for every input, and
the first cross-entropy is ~24 instead of ln(10) = 2.30. Adam still pulls the head back and the
loss falls, so the run looks fine, but the first steps are spent undoing the init. Reproduces
seed 003 §9 ("Initial loss ~ ln(C): Check init"); catalog `bad-initial-loss`.

traindoc-expect: bad-initial-loss@0
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
    p.add_argument("--head-init-std", type=float, default=5.0)
    p.add_argument("--log-every", type=int, default=20)
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


def init_weights(model: Classifier, head_std: float) -> None:
    for m in model.backbone:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    nn.init.normal_(model.head.weight, std=head_std)
    nn.init.zeros_(model.head.bias)


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
    init_weights(model, args.head_init_std)
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
