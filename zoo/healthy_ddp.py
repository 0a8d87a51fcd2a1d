"""Healthy DistributedDataParallel training on CPU (gloo), the torchrun way.

A small MLP regressor wrapped in DDP, a DistributedSampler per rank, SGD with momentum and
a StepLR schedule. Run it with `torchrun --nproc_per_node 2 healthy_ddp.py`; started with
plain `python` it forms a group of one, so the zoo can run it like any other script.

traindoc-expect:
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


def setup() -> tuple[int, int]:
    if "RANK" not in os.environ:  # plain `python healthy_ddp.py`: a group of one
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def main() -> None:
    args = get_args()
    rank, world = setup()
    torch.manual_seed(0)
    x = torch.randn(2048, 16)
    w_true = torch.randn(16, 1)
    y = torch.tanh(x @ w_true) + 0.05 * torch.randn(2048, 1)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=32, sampler=sampler)

    model = DDP(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=40, gamma=0.5)

    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = F.mse_loss(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if rank == 0 and step % 20 == 0:
                print(f"step {step} loss {loss.item():.4f}")
            step += 1
            if step == args.steps:
                break
        epoch += 1
    if args.save and rank == 0:
        torch.save(model.module.state_dict(), args.save)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
