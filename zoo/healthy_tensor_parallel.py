"""Healthy tensor parallelism on two gloo CPU ranks: each rank holds half of each layer.

The two linear layers of an MLP are split Megatron-style with `parallelize_module`: the first
by output columns, the second by input rows, so each rank holds a different half of each
weight (DTensor shards) and the same replicated bias of the last layer is added once. Shards
differ by design. Run it with `torchrun --nproc_per_node 2 healthy_tensor_parallel.py`; with
plain `python` it spawns its two ranks itself.

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
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


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

    mesh = init_device_mesh("cpu", (world,))
    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    model = parallelize_module(net, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        i = (step * 32) % len(x)
        xb, yb = x[i:i + 32], y[i:i + 32]  # tensor parallel: every rank sees the same batch
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
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
