"""DDP whose forward calls the raw module (`model.module(x)`): no gradient is ever averaged.

Two gloo CPU ranks train a small MLP regressor wrapped in DistributedDataParallel, each on its
own shard of the data. The loop calls `model.module(xb)` (say, copied from an evaluation
helper) instead of `model(xb)`: DDP's forward never runs, so its backward hooks never
all-reduce the gradients, and each rank steps on its own shard's gradient. The replicas differ
after the first step and drift apart; the checkpoint saved from rank 0 is one of two models.
Run it with `torchrun --nproc_per_node 2 ddp_raw_module_forward.py`; started with plain
`python` it spawns its two ranks itself (`torch.multiprocessing.spawn`).

traindoc-expect: rank-divergence@0
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
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        i = (step * 32) % len(xs)
        xb, yb = xs[i:i + 32], ys[i:i + 32]
        loss = F.mse_loss(model.module(xb), yb)  # BUG: bypasses DDP, gradients stay local
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
