"""Healthy MLP classifier: AdamW, linear warmup + cosine LR, rare gradient clipping.

The everyday "tabular/feature classifier" train.py: an MLP built from nn.Linear, nn.ReLU and
nn.Dropout modules, a shuffled DataLoader over a TensorDataset, AdamW at lr 1e-3 with weight
decay, a LambdaLR warmup + cosine schedule stepped after optimizer.step(), clip_grad_norm_ at 1.0
as a safety net (it should almost never clip), zero_grad(set_to_none=True), and a held-out
accuracy check in eval mode (dropout off).

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class MLP(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_data(n: int, in_dim: int, n_classes: int, label_noise: float = 0.05):
    """A Gaussian mixture, two clusters per class, with a little label noise."""
    centers = torch.randn(2 * n_classes, in_dim) * 6.0 / math.sqrt(in_dim)
    cluster = torch.randint(0, 2 * n_classes, (n,))
    x = centers[cluster] + torch.randn(n, in_dim)
    y = cluster % n_classes
    flip = torch.rand(n) < label_noise
    y[flip] = torch.randint(0, n_classes, (int(flip.sum()),))
    return x, y


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(dim=1) == y).float().mean().item()
    model.train()
    return loss, acc


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    in_dim, n_classes = 32, 10
    x, y = make_data(5120, in_dim, n_classes)
    x_train, y_train, x_val, y_val = x[:4096], y[:4096], x[4096:], y[4096:]
    loader = DataLoader(
        TensorDataset(x_train, y_train),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
    )

    model = MLP(in_dim, 128, n_classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    def lr_lambda(step: int) -> float:
        if step < args.warmup:
            return (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            scheduler.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                print(
                    f"step {step:4d} | loss {loss.item():.4f} | grad_norm {grad_norm.item():.3f}"
                    f" | lr {scheduler.get_last_lr()[0]:.2e}"
                )
            step += 1
            if step >= args.steps:
                break

    val_loss, val_acc = evaluate(model, x_val, y_val)
    print(f"val loss {val_loss:.4f} | val acc {val_acc:.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
