"""Healthy DDP on per-rank data shards: each rank's loss is noisy, none is off.

The twin of ddp_rank_mislabeled_shard.py with every shard written correctly: the table is
split into one shard per rank (rows rank::world), each rank shuffles its own with its own
DataLoader, so at every step the ranks see different random batches of the same data and their
losses differ by batch noise only. Two gloo CPU ranks, torchrun style; with plain `python` it
spawns its two ranks itself.

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
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

SHIFTED: set[int] = set()  # every shard is written correctly


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


def load_shard(rank: int, world: int) -> TensorDataset:
    """Rows rank::world of the table: 16 features, 4 classes, as shard `rank` holds them."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(1)
    xs, ys = x[rank::world], y[rank::world]
    if rank in SHIFTED:
        ys = torch.roll(ys, 1)
    return TensorDataset(xs, ys)


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)  # each rank shuffles its own shard
    loader = DataLoader(load_shard(rank, world), batch_size=64, shuffle=True)
    torch.manual_seed(0)  # the same initial model on every rank (DDP broadcasts it anyway)
    model = DDP(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step % 20 == 0:
                print(f"rank {rank} step {step} loss {loss.item():.4f}")
            step += 1
            if step == args.steps:
                break
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
