"""DDP with uneven work per rank: rank 1's batches are eight times larger, and everyone waits.

The data was split by hand and rank 1 got the long tail (here: 256 samples per step against
32 on rank 0). DDP keeps the replicas in step, so nothing is wrong with the model; but every
all-reduce waits for rank 1, and the job runs at rank 1's speed. Two gloo CPU ranks; with
plain `python` it spawns its two ranks itself.

traindoc-expect: straggler-rank
"""

import argparse
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
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    x = torch.randn(4096, 16)
    y = torch.tanh(x @ torch.randn(16, 1)) + 0.05 * torch.randn(4096, 1)
    xs, ys = x[rank::world], y[rank::world]  # this rank's shard

    model = DDP(nn.Sequential(nn.Linear(16, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    batch = 32 if rank == 0 else 256  # BUG: uneven split, rank 1 does 8x the work
    for step in range(args.steps):
        i = (step * batch) % (len(xs) - batch)
        xb, yb = xs[i:i + batch], ys[i:i + batch]
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
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
