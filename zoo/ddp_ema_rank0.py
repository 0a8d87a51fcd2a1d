"""DDP with an EMA of the weights updated on rank 0 only, while every rank validates its own EMA.

Seed 004: the EMA model was only updated on rank 0; every rank evaluated with its own copy,
which on the other ranks never moved from its initial weights. Two gloo CPU ranks train a small
MLP regressor in DistributedDataParallel (healthy: the replicas of the model stay identical);
the EMA copy, made on every rank, is updated under `if rank == 0:`. Run it with `torchrun
--nproc_per_node 2 ddp_ema_rank0.py`; with plain `python` it spawns its two ranks itself.

traindoc-expect: rank-divergence@0
"""

import argparse
import copy
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    x = torch.randn(1024, 16)
    y = torch.tanh(x @ torch.randn(16, 1)) + 0.05 * torch.randn(1024, 1)
    xs, ys = x[rank::world], y[rank::world]  # this rank's shard

    model = DDP(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)))
    ema = copy.deepcopy(model.module).requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        i = (step * 32) % len(xs)
        xb, yb = xs[i:i + 32], ys[i:i + 32]
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0:  # BUG: the other ranks' EMA never moves
            with torch.no_grad():
                for e, p in zip(ema.parameters(), model.module.parameters()):
                    e.lerp_(p, 0.1)
        if step % 10 == 0:
            with torch.no_grad():
                val = F.mse_loss(ema(xs[:128]), ys[:128])
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} ema val {val.item():.4f}")
    if args.save and rank == 0:
        torch.save(model.module.state_dict(), args.save)
    dist.barrier()  # both ranks done before the group goes (gloo can abort at exit otherwise)
    dist.destroy_process_group()


def main() -> None:
    args = get_args()
    if "RANK" in os.environ:  # torchrun
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.spawn(worker, args=(2, args), nprocs=2)


if __name__ == "__main__":
    main()
