"""Overhead of live observation on a DDP job: the same job bare and under traindoc, in one run.

Spawns ``--ranks`` gloo CPU ranks training one DistributedDataParallel MLP (about 21M parameters
by default). On every rank, blocks of steps alternate between bare and observed (the probes and
the cross-rank checks installed); one Session per rank lives across its observed blocks, so its
sampling schedule is a real run's (its dense start is observed once, untimed, before the
blocks). Every rank runs the same blocks at the same time, as DDP requires. Reported, per rank:
the median and the mean step time of each condition and their ratios (the mean includes the
sampled steps, where the fingerprint and the exchange through the store happen). Blocks run in
ABBA order and the first steps of each block are left out: on a shared CPU the block that
follows a switch is slower whichever condition it is.

    OMP_NUM_THREADS=1 python benchmarks/ddp_overhead.py                 # 2 ranks, standard level
    OMP_NUM_THREADS=1 python benchmarks/ddp_overhead.py --ranks 4 --width 1024 --rounds 4
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

SETTLE = 2  # steps at the start of each block left out of the timing


def block(model: Any, opt: Any, x: torch.Tensor, y: torch.Tensor, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    return times


def worker(rank: int, args: argparse.Namespace, port: int) -> None:
    from traindoc.live.levels import LEVELS
    from traindoc.live.probes import Probes
    from traindoc.live.ranks import Ranks
    from traindoc.live.session import Session

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(0)
    w = args.width
    net = nn.Sequential(*[m for _ in range(args.layers) for m in (nn.Linear(w, w), nn.ReLU())], nn.Linear(w, 1))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x, y = torch.randn(args.batch, w), torch.randn(args.batch, 1)
    session = Session(level=args.level)
    session.start("ddp_overhead", [])
    probes, ranks = Probes(session), Ranks(session)

    def observed(steps: int) -> list[float]:
        probes.install()
        ranks.install()
        try:
            return block(model, opt, x, y, steps)
        finally:
            probes.uninstall()
            ranks.uninstall()

    block(model, opt, x, y, 3)  # warm-up, bare
    observed(LEVELS[args.level].dense + 1)  # the dense start, untimed
    bare: list[float] = []
    watched: list[float] = []
    for i in range(args.rounds):  # ABBA: neither condition always follows the other
        for run_observed in ((False, True) if i % 2 == 0 else (True, False)):
            times = observed(args.steps) if run_observed else block(model, opt, x, y, args.steps)
            # the first steps of a block pay for the switch (hooks on or off, a colder cache)
            (watched if run_observed else bare).extend(times[SETTLE:])
    results: list[Any] = [None] * args.ranks
    dist.all_gather_object(results, (rank, bare, watched))
    if rank == 0:
        params = sum(p.numel() for p in net.parameters())
        print(f"{args.ranks} gloo CPU ranks, {params / 1e6:.1f}M parameters, level {args.level}, "
              f"{args.rounds} rounds of {args.steps} steps per condition")
        for r, b, o in sorted(results):
            med = statistics.median(o) / statistics.median(b)
            mean = statistics.fmean(o) / statistics.fmean(b)
            print(f"rank {r}: bare median {statistics.median(b) * 1e3:.1f} ms, observed "
                  f"{statistics.median(o) * 1e3:.1f} ms: ratio {med:.3f} (median), {mean:.3f} (mean)")
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--level", default="standard", choices=("cheap", "standard", "thorough"))
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.ranks)


if __name__ == "__main__":
    main()
