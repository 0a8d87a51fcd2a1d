"""Overhead of live observation on a DDP job: the same job bare and under traindoc, in one run.

Spawns ``--ranks`` gloo CPU ranks training one DistributedDataParallel MLP (about 21M parameters
by default). On every rank, short blocks of ``--block`` steps alternate
between bare and observed (the probes and the cross-rank checks installed); one Session per
rank lives across its observed blocks, so its sampling schedule is a real run's (its dense
start is observed once, untimed, before the blocks). Every rank runs the same blocks at the
same time, as DDP requires.

The machine's noise (other jobs on shared cores) changes over seconds, so the conditions are
interleaved finely and compared period by period: a period is one sampling interval of
observed steps (25 at the standard level, so it holds exactly one sampled step with its
fingerprint and exchange) and the bare steps interleaved with them, in blocks of ``--block``
steps in ABBA order (neither condition always runs first). Each period gives one ratio,
observed time over bare time; the report gives the median of the period ratios with their
quartiles, range and a bootstrap interval of the median, for wall-clock time and for the process's CPU time (which a descheduled
process does not accumulate, so other jobs disturb it less), and the ratio of all the time
observed over all the time bare.

    OMP_NUM_THREADS=1 python benchmarks/ddp_overhead.py                 # 2 ranks, standard level
    OMP_NUM_THREADS=1 python benchmarks/ddp_overhead.py --ranks 4 --width 1024 --periods 16
"""

from __future__ import annotations

import argparse
import os
import random
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

def block(model: Any, opt: Any, x: torch.Tensor, y: torch.Tensor, steps: int) -> tuple[float, float]:
    """(wall-clock seconds, process CPU seconds) of ``steps`` training steps."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - wall, time.process_time() - cpu


def spread(ratios: list[float]) -> str:
    """Median with quartiles and range, and a 95% bootstrap interval of the median (fixed seed)."""
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    rng = random.Random(0)
    boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return (f"median {statistics.median(ratios):.3f} (95% interval {boot[50]:.3f}-{boot[1949]:.3f}; "
            f"quartiles {q[0]:.3f}-{q[2]:.3f}, range {min(ratios):.3f}-{max(ratios):.3f})")


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

    def observed(steps: int) -> tuple[float, float]:
        probes.install()
        ranks.install()
        try:
            return block(model, opt, x, y, steps)
        finally:
            probes.uninstall()
            ranks.uninstall()

    level = LEVELS[args.level]
    if level.every % args.block:
        raise SystemExit(f"--block must divide the sampling period ({level.every}), got {args.block}")
    block(model, opt, x, y, 3)  # warm-up, bare
    observed(level.every * (level.dense // level.every + 1))  # the dense start, untimed: the
    # session's next step is a multiple of the period, so each period holds one sampled step
    periods: list[tuple[float, float, float, float]] = []  # (bare wall, observed wall, bare cpu, observed cpu)
    for _ in range(args.periods):
        wall, cpu = [0.0, 0.0], [0.0, 0.0]
        for i in range(level.every // args.block):  # ABBA: neither condition always runs first
            for run_observed in ((False, True) if i % 2 == 0 else (True, False)):
                w, c = observed(args.block) if run_observed else block(model, opt, x, y, args.block)
                wall[run_observed] += w
                cpu[run_observed] += c
        periods.append((wall[0], wall[1], cpu[0], cpu[1]))
    results: list[Any] = [None] * args.ranks
    dist.all_gather_object(results, (rank, periods))
    if rank == 0:
        params = sum(p.numel() for p in net.parameters())
        print(f"{args.ranks} gloo CPU ranks, {params / 1e6:.1f}M parameters, level {args.level}, {args.periods} "
              f"periods of {level.every} observed and {level.every} bare steps in blocks of {args.block}")
        for r, got in sorted(results):
            bare_step = statistics.median(b for b, _, _, _ in got) / level.every
            print(f"rank {r}: bare step {bare_step * 1e3:.1f} ms (median period)")
            print(f"  wall-clock ratio observed/bare per period: {spread([o / b for b, o, _, _ in got])}")
            print(f"  CPU-time ratio observed/bare per period:   {spread([o / b for _, _, b, o in got])}")
            total = sum(o for _, o, _, _ in got) / sum(b for b, _, _, _ in got)
            total_cpu = sum(o for _, _, _, o in got) / sum(b for _, _, b, _ in got)
            print(f"  all periods together: wall-clock ratio {total:.3f}, CPU-time ratio {total_cpu:.3f}")
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--block", type=int, default=5, help="steps per block; divides the sampling period")
    p.add_argument("--periods", type=int, default=12)
    p.add_argument("--level", default="standard", choices=("cheap", "standard", "thorough"))
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.ranks)


if __name__ == "__main__":
    main()
