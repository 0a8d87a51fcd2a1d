"""DDP with uneven work per rank: rank 1's batches are 16 times larger, and everyone waits.

The data was split by hand and rank 1 got the long tail (here: 1024 samples per step against
64 on rank 0). DDP keeps the replicas in step, so nothing is wrong with the model; but every
all-reduce waits for rank 1, and the job runs at rank 1's speed. The model is a random-feature
regression (a fixed random Fourier feature map, then one trained linear layer), so most of a
step is the forward's feature map and rank 1's is many times rank 0's: far past the detector's
bars, on a loaded machine too. Two gloo CPU ranks; with plain `python` it spawns its two ranks
itself.

traindoc-expect: straggler-rank
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
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


class FourierFeatures(nn.Module):
    """sqrt(2 / d_out) cos(x B + b) with a fixed random B and b (buffers: not trained)."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.register_buffer("B", 0.3 * torch.randn(d_in, d_out))
        self.register_buffer("b", torch.rand(d_out) * 6.283)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cos(x @ self.B + self.b) * (2 / self.b.numel()) ** 0.5


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    x = torch.randn(8192, 16)
    y = torch.tanh(x @ torch.randn(16, 1)) + 0.05 * torch.randn(8192, 1)
    xs, ys = x[rank::world], y[rank::world]  # this rank's shard

    model = DDP(nn.Sequential(FourierFeatures(16, 2048), nn.Linear(2048, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    batch = 64 if rank == 0 else 1024  # BUG: uneven split, rank 1 does 16x the work
    for step in range(args.steps):
        i = (step * batch) % (len(xs) - batch)
        xb, yb = xs[i:i + batch], ys[i:i + batch]
        loss = F.mse_loss(model(xb), yb)
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
