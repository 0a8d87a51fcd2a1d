"""fp16 AMP training whose epoch checkpoints lack the LR scheduler and the GradScaler.

An AMP loop (torch.autocast fp16, a torch.amp.GradScaler, unscale_ before clipping, a warmup +
cosine LambdaLR) saves `{"model", "optimizer", "epoch"}` after every epoch, to a new file per
epoch. A resume from it would restart the LR schedule (warmup again) and the scaler at 65536,
which skips the first steps: seed 003's complete state lists the scaler with "Don't forget!".
The checkpoint folder is a temporary directory, removed at the end. CPU autocast/GradScaler
stand in for the CUDA ones.

traindoc-expect: checkpoint-incomplete@56
"""

import argparse
import math
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=None, help="stop after this many optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_data(n: int, in_dim: int, n_classes: int):
    w = torch.randn(in_dim, n_classes) / math.sqrt(in_dim)
    x = torch.randn(n, in_dim)
    y = (3.0 * x @ w + 0.3 * torch.randn(n, n_classes)).argmax(dim=1)
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    device_type = "cpu"  # "cuda" on a GPU

    x, y = make_data(3584, 16, 4)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    total = args.epochs * len(loader)

    def lr_lambda(step: int) -> float:
        if step < args.warmup:
            return (step + 1) / args.warmup
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - args.warmup) / max(1, total - args.warmup))))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    scaler = torch.amp.GradScaler(device_type)

    step = 0
    with tempfile.TemporaryDirectory() as ckpt_dir:
        for epoch in range(args.epochs):
            for xb, yb in loader:
                with torch.autocast(device_type, dtype=torch.float16):
                    loss = F.cross_entropy(model(xb), yb)
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                step += 1
                if args.steps is not None and step >= args.steps:
                    break

            path = os.path.join(ckpt_dir, f"epoch_{epoch}.pt")
            # BUG: no scheduler.state_dict() and no scaler.state_dict()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
            print(f"epoch {epoch} | loss {loss.item():.4f} | saved {path}")
            if args.steps is not None and step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
