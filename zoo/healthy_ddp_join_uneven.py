"""Healthy DDP on uneven shards: each epoch runs under DDP's `Join`, so ranks take different step counts.

The data was split by source, not evenly: rank 0 holds 640 samples and rank 1 holds 512, so
with 32 samples a batch rank 0 takes 20 steps an epoch and rank 1 16. Each epoch runs inside
`torch.distributed.algorithms.Join([model])` (the pattern of PyTorch's "Distributed Training
with Uneven Inputs Using the Join Context Manager" tutorial, pytorch/tutorials
advanced_source/generic_join.rst, read here as SeekPoint/pytorch ykadd-dist/demo11-1.py): once
rank 1 has run out of batches it shadows rank 0's gradient all-reduces until rank 0 is done,
and DDP then copies the final model of the last rank to finish onto every rank. The replicas
are alike at every step of the job, but rank 1's own step counter falls 4 steps further behind
each epoch (its step 21 is the job's step 25). Plain SGD: the optimizer keeps no state, so
nothing but the parameters needs to be alike after each Join (the twin with Adam,
ddp_join_adam_per_epoch, diverges). Five epochs: 100 steps on rank 0, 80 on rank 1. Two gloo CPU ranks; with plain `python` it spawns its two ranks itself.

traindoc-expect:
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

SHARD_SIZES = (640, 512)  # samples per rank: rank 0's source is larger


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


def shard(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)  # each source is its own draw
    x = torch.randn(SHARD_SIZES[rank], 12, generator=g)
    w = torch.linspace(-1, 1, 12).unsqueeze(1)
    return x, torch.sin(x @ w) + 0.05 * torch.randn(len(x), 1, generator=g)


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x, y = shard(rank)
    torch.manual_seed(rank)  # DDP broadcasts rank 0's initial weights when it wraps the model
    model = DDP(nn.Sequential(nn.Linear(12, 48), nn.Tanh(), nn.Linear(48, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        total, batches = 0.0, 0
        with Join([model]):
            for i in range(0, len(x), args.batch_size):
                idx = order[i:i + args.batch_size]
                opt.zero_grad()
                loss = F.mse_loss(model(x[idx]), y[idx])
                loss.backward()
                opt.step()
                total, batches = total + loss.item(), batches + 1
        print(f"rank {rank} epoch {epoch}: {batches} steps, mean loss {total / batches:.4f}")
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
