"""Healthy torch.compile'd MLP: torch.compile(model, backend="aot_eager"), AdamW.

The "I added torch.compile" train.py: the model is built, the optimizer takes its parameters
(the compiled wrapper shares the very same tensors), and the forward goes through
torch.compile with the aot_eager backend (AOTAutograd graphs without inductor codegen, so it
compiles in seconds on CPU). Batches have a fixed shape (drop_last=True) so nothing recompiles;
the state_dict is saved from the original module, not the compiled wrapper (no `_orig_mod.`
prefixes).

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
    p.add_argument("--steps", type=int, default=150, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--log-every", type=int, default=15)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class MLP(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.silu(self.fc1(x))
        x = F.silu(self.fc2(x))
        return self.fc3(x)


def make_data(n: int, in_dim: int, n_classes: int):
    """Classes are angular sectors of a random 2-D projection of the input, plus noise."""
    proj = torch.randn(in_dim, 2) / math.sqrt(in_dim)
    x = torch.randn(n, in_dim)
    z = x @ proj + 0.05 * torch.randn(n, 2)
    angle = torch.atan2(z[:, 1], z[:, 0]) + math.pi  # [0, 2pi]
    y = (angle / (2 * math.pi) * n_classes).long().clamp(max=n_classes - 1)
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    in_dim, n_classes = 24, 8
    x, y = make_data(4608, in_dim, n_classes)
    loader = DataLoader(
        TensorDataset(x[:4096], y[:4096]),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
    )

    model = MLP(in_dim, 128, n_classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    compiled = torch.compile(model, backend="aot_eager")

    compiled.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(compiled(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                print(f"step {step:4d} | loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break

    compiled.eval()
    with torch.no_grad():
        val_logits = model(x[4096:])  # eager for the one-off evaluation: no extra compile
    val_acc = (val_logits.argmax(1) == y[4096:]).float().mean().item()
    print(f"val loss {F.cross_entropy(val_logits, y[4096:]).item():.4f} | val acc {val_acc:.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
