"""Two-process SimCLR-style contrastive pretraining whose DistributedSampler never gets set_epoch().

Each rank reads its half of an unlabeled set through `DistributedSampler(shuffle=True)`, builds
two randomly augmented views of every sample (jitter and feature dropout, drawn fresh at every
access), embeds both with a shared encoder and projection head, and minimises the NT-Xent loss
(the positive pair against the other 2N-2 views of the batch). The epoch loop never calls
`train_sampler.set_epoch(epoch)`: the sampler shuffles with `seed + epoch`, its epoch stays 0,
and every epoch visits the samples in epoch 0's order, in the same batches, on every rank. The
augmentations differ from epoch to epoch, so no two batches are byte-identical: only the
sampler's own state shows the repeated order. Written after reading the DDP training loop of
Spijkervet/SimCLR (main.py as of commit 212fdff, "Added distributed-data-parallel instead of
DP"; commit de910ae added the missing `set_epoch` call). Two gloo CPU ranks, torchrun style;
with plain `python` it spawns its two ranks itself.

traindoc-expect: repeated-batch@8
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16, help="samples per rank and step")
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--save", type=str, default=None)
    p.add_argument("--set-epoch", action="store_true", help="reshuffle every epoch (the fix)")
    return p.parse_args()


class TwoViews(Dataset):
    """Unlabeled 24-d points from 6 clusters; each access returns two random views of one point."""

    def __init__(self, n: int = 256) -> None:
        g = torch.Generator().manual_seed(0)
        centers = torch.randn(6, 24, generator=g) * 2
        self.points = centers[torch.randint(0, 6, (n,), generator=g)] + 0.3 * torch.randn(n, 24, generator=g)

    def __len__(self) -> int:
        return len(self.points)

    def view(self, x: torch.Tensor) -> torch.Tensor:
        keep = (torch.rand_like(x) > 0.2).float()  # feature dropout
        return x * keep + 0.1 * torch.randn_like(x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.points[i]
        return self.view(x), self.view(x)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, 32))
        self.projector = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))

    def forward(self, a: torch.Tensor, b: torch.Tensor):
        ha, hb = self.backbone(a), self.backbone(b)
        return ha, hb, self.projector(ha), self.projector(hb)


def nt_xent(za: torch.Tensor, zb: torch.Tensor, temperature: float) -> torch.Tensor:
    """Each view's positive is the other view of its sample; the rest of the batch are negatives."""
    n = za.shape[0]
    z = F.normalize(torch.cat([za, zb]), dim=1)
    sim = z @ z.t() / temperature
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool), -1e9)  # a view is not its own pair
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(sim, targets)


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    data = TwoViews()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    model = DDP(Encoder())
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    torch.manual_seed(1 + rank)  # each rank's augmentations are its own
    step = 0
    for epoch in range(args.epochs):
        if args.set_epoch:
            sampler.set_epoch(epoch)
        total = 0.0
        for xa, xb in loader:
            _, _, za, zb = model(xa, xb)
            loss = nt_xent(za, zb, args.temperature)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
            step += 1
        if rank == 0:
            print(f"epoch {epoch} step {step} loss {total / len(loader):.4f}")
    if args.save and rank == 0:
        torch.save(model.module.state_dict(), args.save)
    dist.barrier()  # both ranks done before the group goes (gloo can abort at exit otherwise)
    dist.destroy_process_group()


def main(set_epoch: bool = False) -> None:
    args = get_args()
    args.set_epoch = args.set_epoch or set_epoch
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
