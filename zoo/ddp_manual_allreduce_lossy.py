"""Gradients averaged by hand over a lossy path: the all-reduce fills a temporary copy.

No DDP wrapper; the loop averages the gradients itself, compressed to bfloat16 to save
bandwidth: `dist.all_reduce(p.grad.to(torch.bfloat16))`. `.to()` makes a new tensor, the
all-reduce sums into it, and the result is thrown away: every rank steps on its own shard's
gradient, and the replicas drift apart from the first step. Two gloo CPU ranks; with plain
`python` it spawns its two ranks itself.

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

    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    for p in model.parameters():  # same start on every rank
        dist.broadcast(p.data, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        i = (step * 32) % len(xs)
        xb, yb = xs[i:i + 32], ys[i:i + 32]
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for p in model.parameters():
            compressed = p.grad.to(torch.bfloat16)
            dist.all_reduce(compressed)  # BUG: the average never reaches p.grad
            compressed /= world
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    if args.save and rank == 0:
        torch.save(model.state_dict(), args.save)
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
