"""DDP where one rank's data shard has its labels one row late: a per-rank data bug.

The table was split by a preprocessing job into one shard per rank (rows rank::world), which
each rank loads and shuffles with its own DataLoader. The job that wrote shard 1 read the
label file's header line as a row, so every label in that shard belongs to the row before
(simulated below by `load_shard`). Rank 1 trains on labels that no longer match its inputs.
DDP keeps the replicas identical, so their parameters never differ; the model learns rank 0's
labels while rank 1's loss stays near chance (so rank 1 alone also sees a stalled loss). Two
gloo CPU ranks, torchrun style; with plain `python` it spawns its two ranks itself.

traindoc-expect: rank-loss-skew stalled-loss@0
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

SHIFTED = (1,)  # shards whose labels were written one row late


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--save", type=str, default=None)
    p.add_argument("--fixed", action="store_true", help="every shard written correctly")
    return p.parse_args()


def load_shard(rank: int, world: int, shifted: tuple[int, ...]) -> TensorDataset:
    """Rows rank::world of the table: 16 features, 4 classes, as shard `rank` holds them."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(1)
    xs, ys = x[rank::world], y[rank::world]
    if rank in shifted:  # the corrupt file: each label is the previous row's
        ys = torch.roll(ys, 1)
    return TensorDataset(xs, ys)


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)  # each rank shuffles its own shard
    loader = DataLoader(load_shard(rank, world, () if args.fixed else SHIFTED), batch_size=64, shuffle=True)
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


def main(fixed: bool = False) -> None:
    args = get_args()
    args.fixed = args.fixed or fixed
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
