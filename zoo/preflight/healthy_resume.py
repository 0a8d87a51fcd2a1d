"""Auto-resuming classifier that saves its complete state: a resumed run continues exactly.

The cluster-style train.py: on start it resumes from `<out>/last.pt` if the file exists, and
every `--ckpt-every` steps it writes the model, optimizer, LR scheduler, step and the global RNG
state there (atomically: a temporary file, then os.replace). Batches are random indices drawn
with torch.randint and the MLP has dropout, so the RNG state matters. A relaunch after a
preemption trains exactly as an uninterrupted run would.

preflight-expect: resume:pass initial-loss:pass gradients:pass overfit:pass eval:pass
"""

import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--out", default="out")
    return p.parse_args()


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x = torch.randn(1024, 16)
    y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4:8].sum(1) > 0).long()
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 10) * 0.5 * (1 + math.cos(math.pi * s / args.steps)))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "last.pt")
    start = 0
    if os.path.exists(path):
        ckpt = torch.load(path)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        torch.set_rng_state(ckpt["rng"])
        start = ckpt["step"]
        print(f"resumed from {path} at step {start}")

    for step in range(start, args.steps):
        idx = torch.randint(0, x.size(0), (args.batch_size,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if (step + 1) % args.ckpt_every == 0:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "scheduler": scheduler.state_dict(), "step": step + 1, "rng": torch.get_rng_state()}
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
            print(f"step {step:3d} | loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
