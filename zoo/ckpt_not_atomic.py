"""A "latest" checkpoint overwritten in place every few steps: a crash mid-write loses it.

The loop saves its full training state (model, optimizer, scheduler, step) every 10 steps with
`torch.save(state, "<out>/last.pt")`, straight over the previous file, the way seed 000's
`last_checkpoint.pt` is written. Nothing goes wrong in this run, but a crash, preemption or full
disk during one of those writes would leave a truncated last.pt and no earlier checkpoint. The
healthy twin (healthy_ckpt_resume.py) writes last.pt.tmp and os.replace()s it. The output folder
is a temporary directory, removed at the end.

traindoc-expect: checkpoint-not-atomic@20
"""

import argparse
import math
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--ckpt-every", type=int, default=10)
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
    x, y = make_data(4096, 32, 8)

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)

    with tempfile.TemporaryDirectory() as out_dir:
        ckpt_path = os.path.join(out_dir, "last.pt")
        for step in range(args.steps):
            idx = torch.randint(0, x.size(0), (args.batch_size,))
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()

            if (step + 1) % args.ckpt_every == 0:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict(), "step": step + 1}
                torch.save(state, ckpt_path)  # BUG: overwrites last.pt in place
                print(f"step {step:4d} | loss {loss.item():.4f} | saved {ckpt_path}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
