"""A small torchrun job for the cross-rank tests: DDP (or a plain model per rank) on gloo.

Options make one rank misbehave the ways the no-deadlock guarantee covers: take fewer steps
(DDP's `join()` keeps the others going), raise, or vanish without any cleanup; or be slow in
its own work outside its DataLoader (`--extra-ms`, with batches from a DataLoader: `--loader`).
"""

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--fewer", type=int, default=0, help="rank 1 takes this many steps fewer")
p.add_argument("--raise-at", type=int, default=-1, help="rank 1 raises at this step")
p.add_argument("--vanish-at", type=int, default=-1, help="rank 1 calls os._exit(0) at this step")
p.add_argument("--nan-at", type=int, default=-1, help="rank 1's loss is NaN from this step on")
p.add_argument("--solo", action="store_true", help="no DDP: each rank trains its own copy")
p.add_argument("--loader", action="store_true", help="batches from a DataLoader over this rank's rows")
p.add_argument("--extra-ms", type=float, default=0, help="rank 1 does this much extra host work per step")
p.add_argument("--save-dir", default=None)
args = p.parse_args()



def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    y = x.sum(1, keepdim=True).tanh()
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    model = net if args.solo else DDP(net)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    steps = args.steps - (args.fewer if rank == 1 else 0)
    loader = DataLoader(TensorDataset(x[rank::world], y[rank::world]), batch_size=16)
    batches = (b for _ in range(steps) for b in loader) if args.loader else None
    join = model.join() if isinstance(model, DDP) else contextlib.nullcontext()
    with join:
        for step in range(steps):
            if rank == 1 and step == args.raise_at:
                raise RuntimeError("rank 1 failed on purpose")
            if rank == 1 and step == args.vanish_at:
                os._exit(0)
            if batches is not None:
                xb, yb = next(batches)
            else:
                xb, yb = x[rank::world][step % 8 * 16:(step % 8 + 1) * 16], y[rank::world][step % 8 * 16:(step % 8 + 1) * 16]
            if rank == 1 and args.extra_ms:
                time.sleep(args.extra_ms / 1e3)  # host work the other rank does not do (metrics, logging)
            loss = F.mse_loss(model(xb), yb)
            if rank == 1 and 0 <= args.nan_at <= step:
                loss = loss * float("nan")
            opt.zero_grad()
            loss.backward()
            opt.step()
    if args.save_dir:
        torch.save(net.state_dict(), os.path.join(args.save_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


main()
