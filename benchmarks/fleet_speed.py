"""How fast is ``traindoc logs runs/`` on a fleet? End to end, as a user runs it.

    python benchmarks/fleet_speed.py                 # 1,000 runs of 2,000 steps, 3 timings
    python benchmarks/fleet_speed.py --runs 200 --repeat 1

Generates (once, cached in a temp folder) a folder of ``--runs`` CSV runs (step, loss, lr,
grad_norm every step; val_loss and val_acc every 100 steps) with seed-to-seed noise, one run in
50 with a planted failure (divergence, exploding gradients, a stalled loss), then times
``python -m traindoc logs RUNS --json OUT`` in a fresh interpreter (start-up, discovery, every
run's diagnosis, the sibling comparison, the fleet view and the JSON of every report). Reports
the best and the median wall time and the peak memory of the command (its largest process:
the parent or one worker, from the kernel's rusage) and the CPU time of all its processes,
which a busy machine does not change (its wall time it does: other jobs take the cores). Checks that exactly the planted runs are
diagnosed. Target: under 60 s for 1,000 runs on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = 2000
PLANTS = ("divergence", "exploding-gradients", "stalled-loss")


def make_run(path: Path, seed: int, plant: str | None) -> None:
    rng = random.Random(seed)
    rate = 400 * (1 + 0.08 * rng.uniform(-1, 1))
    lines = ["step,loss,lr,grad_norm,val_loss,val_acc"]
    for s in range(STEPS):
        d = math.exp(-s / rate)
        loss = (2.2 * d + 0.3) * (1 + 0.01 * rng.gauss(0, 1))
        grad = (0.6 + 1.2 * d) * (1 + 0.05 * rng.gauss(0, 1))
        if plant == "divergence" and s >= 1200:
            loss *= math.exp((s - 1200) / 40)
        elif plant == "exploding-gradients":
            grad *= 4e4
        elif plant == "stalled-loss":
            loss = 2.3 * (1 + 0.002 * rng.gauss(0, 1))
        val = f"{(2.2 * d + 0.35) * (1 + 0.01 * rng.gauss(0, 1)):.6g},{0.93 - 0.83 * d:.6g}" if s % 100 == 99 else ","
        lines.append(f"{s},{loss:.6g},3e-4,{grad:.5g},{val}")
    path.write_text("\n".join(lines) + "\n")


def make_fleet(folder: Path, runs: int) -> dict[str, str]:
    """{run file name: planted id} for the runs with a failure."""
    planted = {}
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(runs):
        plant = PLANTS[(i // 50) % len(PLANTS)] if i % 50 == 25 else None
        name = f"lr{i % 4}/seed{i:04d}.csv"
        (folder / name).parent.mkdir(exist_ok=True)
        if not (folder / name).exists():
            make_run(folder / name, i, plant)
        if plant:
            planted[name] = plant
    return planted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.gettempdir()) / f"traindoc-fleet-bench-{args.runs}x{STEPS}"
    t = time.perf_counter()
    planted = make_fleet(folder, args.runs)
    print(f"{args.runs} runs of {STEPS} steps in {folder} (made or found in {time.perf_counter() - t:.1f} s)")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    out = folder.parent / f"{folder.name}.json"
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(args.repeat):
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        before, cpu0 = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "traindoc", "logs", str(folder), "--json", str(out)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        walls.append(time.perf_counter() - t)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak = usage.ru_maxrss  # KiB, the largest process so far (the command's parent or a worker)
        cpus.append(usage.ru_utime + usage.ru_stime - cpu0)  # every process of the command
        if done.returncode != 0:
            sys.exit(f"traindoc logs exited {done.returncode}: {done.stderr[-2000:]}")
        print(f"  {walls[-1]:.1f} s wall, {cpus[-1]:.1f} s CPU, peak memory of one process {peak / 1024:.0f} MiB"
              + (" (or an earlier run's)" if before == peak and before else ""))
    doc = json.loads(out.read_text())
    found = {r["name"]: {f["id"] for f in r["report"]["findings"]} for r in doc["runs"]}
    wrong = {n: ids for n, ids in found.items() if ids != ({planted[n]} if n in planted else set())}
    print(f"{args.runs} runs: best {min(walls):.1f} s, median {statistics.median(walls):.1f} s "
          f"({1000 * min(walls) / args.runs:.1f} ms a run); {len(planted)} planted failures, "
          f"{len(wrong)} runs diagnosed otherwise{': ' + str(dict(list(wrong.items())[:5])) if wrong else ''}")
    print(f"CPU time of all its processes: best {min(cpus):.1f} s; load average before the last run "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; JSON report {out.stat().st_size / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
