"""Healthy fp16 mixed precision: autocast + GradScaler, unscale_ before clipping.

The textbook AMP loop (seed 003's "GradScaler Logic"): parameters stay fp32, the forward and
the loss run under torch.autocast(dtype=torch.float16), the loss is scaled by a
torch.amp.GradScaler before backward, and `scaler.unscale_(optimizer)` runs right before
clip_grad_norm_, so the clip sees true gradient norms; then scaler.step / scaler.update and a
warmup + cosine LambdaLR. On a GPU this is torch.autocast("cuda") and GradScaler("cuda"); here
the CPU versions, with a tiny MLP because fp16 matmuls are slow on CPU.

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
    p.add_argument("--steps", type=int, default=80, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--clip", type=float, default=1.0)
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
    """Labels from a random linear teacher, with a little logit noise."""
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
    loader = DataLoader(TensorDataset(x[:3584], y[:3584]), batch_size=args.batch_size, shuffle=True,
                        drop_last=True)

    model = MLP(in_dim, 32, n_classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    def lr_lambda(step: int) -> float:
        if step < args.warmup:
            return (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    scaler = torch.amp.GradScaler(device_type)

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            with torch.autocast(device_type, dtype=torch.float16):
                logits = model(xb)
                loss = F.cross_entropy(logits, yb)

            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)  # clip the true gradients, not gradients * scale
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                print(f"step {step:4d} | loss {loss.item():.4f} | grad_norm {grad_norm.item():.3f}"
                      f" | scale {scaler.get_scale():.0f}")
            step += 1
            if step >= args.steps:
                break

    model.eval()
    with torch.no_grad(), torch.autocast(device_type, dtype=torch.float16):
        logits = model(x[3584:]).float()
    print(f"val acc {(logits.argmax(1) == y[3584:]).float().mean().item():.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
