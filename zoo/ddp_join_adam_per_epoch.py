"""DDP on uneven shards with a `Join` per epoch and Adam: the rank that joined early keeps stale Adam state.

The twin of healthy_ddp_join_uneven, with Adam instead of plain SGD. Rank 0 holds 640 samples
and rank 1 512: 20 and 16 steps an epoch, each epoch under `Join([model])`. When rank 1 runs
out of batches it shadows rank 0's last 4 gradient all-reduces without stepping, and at the
end of the epoch DDP copies rank 0's parameters onto it; but not Adam's moments and step
count, which stay 4 steps behind on rank 1. From the next step on the same averaged gradient
moves the two replicas differently: at the job's step 25 (rank 1's own step 21) they differ.
Fix: `Join([model, optimizer])` with a joinable optimizer (ZeroRedundancyOptimizer), or even
shards (DistributedSampler with drop_last). Two gloo CPU ranks; with plain `python` it spawns
its two ranks itself.

traindoc-expect: rank-divergence@25
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
    opt = torch.optim.Adam(model.parameters(), lr=args.lr / 10)  # BUG: its state is not joined
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
