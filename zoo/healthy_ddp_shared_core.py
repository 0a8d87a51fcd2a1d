"""Healthy DDP on a busy machine: rank 1 shares its CPU core with another process; the loss is all-reduced for logging after each step.

Both ranks do the same work per step (the same model, 512 samples a batch). The loop follows
the shape of NVIDIA apex's ImageNet example (examples/imagenet/main_amp.py, `train`): after
`optimizer.step()` it measures the batch accuracy and averages loss and accuracy over the
ranks with an all-reduce of a copy, for rank 0 to print. Here that happens on every step.
Another job (a stand-in for someone else's on the same host: two busy loops) is pinned to
rank 1's core, so rank 1 gets about a third of a core and its steps take longer in wall time,
and rank 0 waits for it in every all-reduce, the logging one included. Neither rank does
more work than the other: nothing here is a straggler of the job's own making. Two gloo CPU
ranks; with plain `python` it spawns its two ranks itself.

traindoc-expect:
"""

import argparse
import os
import socket
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

N_CLASSES = 10


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


def pin(rank: int) -> list[subprocess.Popen]:
    """Each rank on its own core; on rank 1's core also another 'job' (two busy loops)."""
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        return []
    cores = sorted(os.sched_getaffinity(0))[:2]
    os.sched_setaffinity(0, {cores[rank % 2]})
    if rank != 1:
        return []
    busy = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"  # ends with this rank
    others = [subprocess.Popen([sys.executable, "-c", busy]) for _ in range(2)]
    for other in others:
        os.sched_setaffinity(other.pid, {cores[1]})
    return others


def blobs(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    centers = 2.0 * torch.randn(N_CLASSES, 32, generator=g)
    labels = torch.randint(0, N_CLASSES, (8192,), generator=g)
    x = centers[labels] + torch.randn(8192, 32, generator=g)
    return x[rank::world], labels[rank::world]


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    others = pin(rank)
    try:
        train(rank, world, args)
    finally:
        for other in others:
            other.kill()
            other.wait()


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    xs, ys = blobs(rank, world)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, N_CLASSES)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        i = (step * 512) % (len(xs) - 512)
        xb, yb = xs[i:i + 512], ys[i:i + 512]
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        # Average loss and accuracy over the ranks, for the log (a copy: the graph is untouched).
        stats = torch.stack([loss.detach(), (out.argmax(1) == yb).float().mean()])
        dist.all_reduce(stats)
        stats /= world
        if rank == 0 and step % 20 == 0:
            print(f"step {step} loss {stats[0].item():.4f} acc {stats[1].item():.3f}")
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
