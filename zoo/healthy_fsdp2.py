"""Healthy FSDP2 (`fully_shard`) training on two gloo CPU ranks: shards differ by design.

Each rank holds half of every parameter (a DTensor sharded on dim 0); the optimizer steps its
own shard. The replicas are not copies of each other, and nothing must call them divergent.
Run it with `torchrun --nproc_per_node 2 healthy_fsdp2.py`; with plain `python` it spawns its
two ranks itself.

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
from torch.distributed.fsdp import fully_shard


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

    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    for layer in (net[0], net[2]):
        fully_shard(layer)
    model = fully_shard(net)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        i = (step * 32) % len(xs)
        xb, yb = xs[i:i + 32], ys[i:i + 32]
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}  # every rank takes part
    if args.save and rank == 0:
        torch.save(full, args.save)
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
