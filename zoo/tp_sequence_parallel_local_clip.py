"""Hand-written tensor parallelism clipped with torch's clip_grad_norm_: each rank's norm covers its own shards only.

The twin of healthy_tp_sequence_parallel: the same hand-written Megatron-style shards (plain
parameters) and sequence parallelism, the replicated LayerNorm, head and bias all-reduced
correctly; then `torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)`. On one device that
is right; here each rank's parameters hold only its half of the hidden units, so each rank
computes a different total norm and scales the same replicated gradients by a different
factor: the replicated tensors take different steps from the first clipped step (step 0) on.
Fix: sum the squared norms of the shards over the ranks (an all-reduce) before taking the
root, counting replicated tensors once. Run it with `torchrun --nproc_per_node 2
tp_sequence_parallel_local_clip.py`; with plain `python` it spawns its two ranks itself.

traindoc-expect: rank-divergence@0
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
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # BUG: this rank's shards only
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
