"""DDP that averages the loss across ranks with `dist.all_reduce` before `backward()`.

Seed 000: `dist.all_reduce()` called on a tensor inside the autograd graph. Here the loss is
all-reduced (for logging) and divided by the world size before `loss.backward()`: the value
changes, but the backward is the local loss's, divided by the world size on top of DDP's own
averaging, so every step is world-size times too small. Two gloo CPU ranks; with plain
`python` it spawns its two ranks itself.

traindoc-expect: autograd-collective@0
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
        loss = F.mse_loss(model(xb), yb)
        dist.all_reduce(loss)  # BUG: in the autograd graph; meant for logging
        loss = loss / world
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} mean loss {loss.item():.4f}")
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
