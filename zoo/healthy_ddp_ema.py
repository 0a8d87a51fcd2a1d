"""Healthy DDP with an EMA on every rank and the loss averaged across ranks for logging.

The twin of ddp_raw_module_forward, ddp_ema_rank0, ddp_clip_one_rank and ddp_allreduce_loss:
the forward goes through the DDP wrapper, every rank clips and updates its EMA copy, and the
loss is averaged across ranks on a detached copy. Two gloo CPU ranks; with plain `python` it
spawns its two ranks itself.

traindoc-expect:
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
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.module.parameters()):
                e.lerp_(p, 0.1)
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        if rank == 0 and step % 10 == 0:
            print(f"step {step} mean loss {logged.item() / world:.4f}")
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
