"""fp16 AMP with gradient clipping before scaler.unscale_: the clip sees gradients * 65536.

Seed 003's rule, broken: the loop scales the loss with a torch.amp.GradScaler and clips with
clip_grad_norm_(max_norm=1.0) right after backward, but never calls
`scaler.unscale_(optimizer)` first. The clip measures the gradient norm multiplied by the scale
(65536), clips every step down to 1.0, and scaler.step then divides by the scale: every update
uses a gradient of norm 1.5e-5. Loss and accuracy look plausible because AdamW renormalizes,
so nothing crashes. CPU autocast/GradScaler stand in for the CUDA ones.

traindoc-expect: clip-before-unscale@0
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class MLP(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.fc1(x))
        x = F.gelu(self.fc2(x))
        return self.head(x)


def make_data(n: int, in_dim: int, n_classes: int):
    w = torch.randn(in_dim, n_classes) / math.sqrt(in_dim)
    x = torch.randn(n, in_dim)
    y = (3.0 * x @ w + 0.3 * torch.randn(n, n_classes)).argmax(dim=1)
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    device_type = "cpu"  # "cuda" on a GPU

    in_dim, n_classes = 16, 4
    x, y = make_data(4096, in_dim, n_classes)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True)

    model = MLP(in_dim, 32, n_classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    scaler = torch.amp.GradScaler(device_type)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            with torch.autocast(device_type, dtype=torch.float16):
                loss = F.cross_entropy(model(xb), yb)

            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            # BUG: clipping scaled gradients (no scaler.unscale_(optimizer) before this line)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.max_norm)
            scaler.step(optimizer)
            scaler.update()

            if step % args.log_every == 0 or step == args.steps - 1:
                print(f"step {step:4d} | loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
