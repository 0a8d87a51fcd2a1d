"""Tensor parallelism whose hand-written gradient clipping takes the norm of this rank's shards only.

An MLP block with a residual, a LayerNorm and a head, its two linear layers split Megatron-style
over two ranks with `parallelize_module` (the LayerNorm and the head are replicated: every rank
holds the same copy). Gradients are clipped by a hand-written global-norm function, as Megatron
and DeepSpeed code does; it sums the squares of the gradients this rank holds and forgets to
add the other ranks' shards (the all-reduce over the tensor-parallel group). Each rank then
scales its gradients by a different factor, and the replicated LayerNorm and head take
different steps from the first clipped step on: DeepSpeed PR 1801, BLOOM-176B's diverging
LayerNorms. Run it with `torchrun --nproc_per_node 2 tp_clip_local_norm.py`; with plain
`python` it spawns its two ranks itself.

traindoc-expect: rank-divergence@0
"""

import argparse
import math
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--max-norm", type=float, default=0.5)
    p.add_argument("--save", type=str, default=None)
    p.add_argument("--shards-summed", action="store_true",
                   help="the fix: add every rank's sharded part of the squared norm")
    return p.parse_args()


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(16, 64), nn.Linear(64, 16)
        self.norm, self.head = nn.LayerNorm(16), nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.down(F.gelu(self.up(x)))
        return self.head(self.norm(h))


def is_sharded(t: torch.Tensor) -> bool:
    return any(type(p).__name__.startswith("Shard") for p in getattr(t, "placements", ()))


def clip_grad_norm(params: list[nn.Parameter], max_norm: float, shards_summed: bool) -> float:
    """Global-norm clipping over tensor-parallel shards: replicated gradients count once."""
    grads = [p.grad for p in params if p.grad is not None]
    local = lambda g: g.to_local() if hasattr(g, "to_local") else g  # noqa: E731
    replicated = sum(float(local(g).pow(2).sum()) for g in grads if not is_sharded(g))
    sharded = torch.tensor(sum(float(local(g).pow(2).sum()) for g in grads if is_sharded(g)))
    if shards_summed:
        dist.all_reduce(sharded)  # the shards of the other ranks
    total = math.sqrt(replicated + float(sharded))  # BUG without the all-reduce: this rank's shards only
    scale = max_norm / (total + 1e-6)
    if scale < 1:
        for g in grads:
            g.mul_(scale)
    return total


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    x = torch.randn(1024, 16)
    y = torch.tanh(x @ torch.randn(16, 1)) + 0.05 * torch.randn(1024, 1)

    mesh = init_device_mesh("cpu", (world,))
    model = parallelize_module(Block(), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        i = (step * 32) % len(x)
        xb, yb = x[i:i + 32], y[i:i + 32]  # tensor parallel: every rank sees the same batch
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = clip_grad_norm(params, args.max_norm, args.shards_summed)
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} grad norm {norm:.3f}")
    full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    if args.save and rank == 0:
        torch.save(full, args.save)
    dist.barrier()  # both ranks done before the group goes (gloo can abort at exit otherwise)
    dist.destroy_process_group()


def main(shards_summed: bool = False) -> None:
    args = get_args()
    args.shards_summed = args.shards_summed or shards_summed
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
