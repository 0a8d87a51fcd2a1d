"""Healthy hand-written tensor parallelism with sequence parallelism: replicated norm and head, all-reduced gradients.

No DTensor: the MLP's two linear layers are split by hand, Megatron-style, into plain
parameters (each rank holds its half of the hidden units: a column shard of `up` and a row
shard of `down`, different values on each rank by design). The LayerNorm, the head and the
bias of `down` are replicated: the same initial values on every rank. With sequence
parallelism each rank normalises and scores only its own half of each sequence, so the
gradients of those replicated tensors come from rank-local tokens; the loop all-reduces them
(sums: the objective is the sum of the ranks' losses, as for the shards) before the step, and
the replicas stay alike. Twin: tp_sequence_parallel_local_clip. Run it with `torchrun
--nproc_per_node 2 healthy_tp_sequence_parallel.py`; with plain `python` it spawns its two
ranks itself.

traindoc-expect:
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnn
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

D, HIDDEN, SEQ = 16, 64, 8


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


class ShardedMLP(nn.Module):
    """norm -> gather the sequence -> up (column shard) -> gelu -> down (row shard) -> sum over
    ranks -> this rank's half of the sequence -> head. Shards: `up_*`, `down_weight`."""

    def __init__(self, rank: int, world: int) -> None:
        super().__init__()
        self.rank, self.world = rank, world
        full_up, full_down = nn.Linear(D, HIDDEN), nn.Linear(HIDDEN, D)  # the same on every rank (seeded)
        part = slice(rank * HIDDEN // world, (rank + 1) * HIDDEN // world)
        self.up_weight = nn.Parameter(full_up.weight.detach()[part].clone())
        self.up_bias = nn.Parameter(full_up.bias.detach()[part].clone())
        self.down_weight = nn.Parameter(full_down.weight.detach()[:, part].clone())
        self.down_bias = nn.Parameter(full_down.bias.detach().clone())  # replicated
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, 1)  # replicated

    def forward(self, x_local: torch.Tensor) -> torch.Tensor:  # (batch, SEQ / world, D)
        h = torch.cat(dnn.all_gather(self.norm(x_local)), dim=1)  # (batch, SEQ, D)
        partial = F.gelu(h @ self.up_weight.T + self.up_bias) @ self.down_weight.T
        full = dnn.all_reduce(partial) + self.down_bias  # the sum over the hidden shards
        n = SEQ // self.world
        mine = full[:, self.rank * n:(self.rank + 1) * n]
        return self.head(x_local + mine).squeeze(-1)  # (batch, SEQ / world)


def replicated(model: ShardedMLP) -> list[nn.Parameter]:
    return [model.down_bias, *model.norm.parameters(), *model.head.parameters()]


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    x = torch.randn(512, SEQ, D)
    y = torch.tanh(x.sum(-1) / 4 + torch.roll(x[..., 0], 1, dims=1))  # depends on the previous token
    n = SEQ // world
    xs, ys = x[:, rank * n:(rank + 1) * n], y[:, rank * n:(rank + 1) * n]  # this rank's half of each sequence
    model = ShardedMLP(rank, world)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        i = (step * 32) % (len(xs) - 32)
        loss = F.mse_loss(model(xs[i:i + 32]), ys[i:i + 32])
        opt.zero_grad()
        loss.backward()
        for p in replicated(model):  # their gradients come from this rank's tokens only
            dist.all_reduce(p.grad)
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
