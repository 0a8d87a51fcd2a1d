"""FSDP2 training whose optimizer was built before `fully_shard`: the model never trains.

A trainer class builds a small residual MLP, then its AdamW from `self.model.parameters()`, and
only then shards the model: each block with `fully_shard`, then the whole. `fully_shard`
registers new parameters (DTensor shards of the old ones) in the model. The forward and the
backward run on those; the optimizer holds the old tensors, which get no gradient, so every
`step()` is a no-op and `zero_grad()` clears nothing the model uses (the shards' gradients pile
up). The loss moves only with the batches. The FSDP2 docs ask for the optimizer after sharding;
PyTorch's own tensor-parallel example had the same order with `parallelize_module` until
pytorch/examples PR 1324. Two gloo CPU ranks; with plain `python` it spawns them itself. The
twin of healthy_fsdp2, whose optimizer comes after the sharding.

traindoc-expect: optimizer-param-mismatch@0
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
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.fc(self.norm(x)))


class Regressor(nn.Module):
    def __init__(self, width: int = 32, depth: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.layers = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


class Trainer:
    def __init__(self, rank: int, world: int, args: argparse.Namespace) -> None:
        self.rank, self.world, self.args = rank, world, args
        torch.manual_seed(0)
        self.model = Regressor()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.01)
        for block in self.model.layers:
            fully_shard(block)
        fully_shard(self.model)
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(2048, 8, generator=g)
        self.y = (self.x[:, :4].sum(1, keepdim=True) / 2).sin()

    def train_step(self, step: int) -> float:
        i = step * 64 % (len(self.x) - 64 * self.world)
        rows = slice(i + self.rank, i + 64 * self.world, self.world)  # this rank's half of the batch
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(self.model(self.x[rows]), self.y[rows])
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def fit(self) -> None:
        for step in range(self.args.steps):
            loss = self.train_step(step)
            if self.rank == 0 and step % 10 == 0:
                print(f"step {step} loss {loss:.4f}")


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    trainer = Trainer(rank, world, args)
    trainer.fit()
    full = {k: v.full_tensor() for k, v in trainer.model.state_dict().items()}  # every rank takes part
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
