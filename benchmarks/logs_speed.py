"""How fast is ``traindoc logs`` on big logs? End to end, as a user runs it.

    python benchmarks/logs_speed.py              # 1,000,000 rows / points, 5 runs each
    python benchmarks/logs_speed.py --rows 200000 --repeat 3 --check

Generates (once, cached in a temp folder) a 1,000,000-row CSV (step, loss, lr, grad_norm) and
a 1,000,000-point TensorBoard event file (one scalar tag, written in SummaryWriter.add_scalar's
exact record layout by a small writer here: SummaryWriter itself needs ~100 s for 1M points),
then times ``python -m traindoc logs FILE`` in a fresh interpreter (start-up included), in a
user's environment: no OMP/BLAS thread settings, bytecode compiled once as an install does.
Reports the best and the median of ``--repeat`` runs, the CPU time of the phases inside one
process, and with ``--check`` that every CSV value parsed is bit for bit what float() gives.
Target: under 1 s.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# As `traindoc logs` does before it imports numpy (sources/logs/cli.py): one BLAS thread, so
# that the in-process phases measure what the command runs.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def make_csv(path: Path, rows: int) -> None:
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("step,loss,lr,grad_norm\n")
        for s in range(rows):
            loss = 2.5 * math.exp(-s / (rows / 4)) + 0.2 + 0.05 * rng.random()
            lr = 3e-4 * min(1.0, (s + 1) / 2000) * (0.55 + 0.45 * math.cos(math.pi * s / rows))
            fh.write(f"{s},{loss:.6g},{lr:.6g},{1.0 + 0.3 * rng.random():.5g}\n")


def make_tfevents(path: Path, points: int, tag: str = "train/loss") -> None:
    """SummaryWriter.add_scalar's records: Event{wall_time, step, summary{value{tag, simple_value}}}."""
    from traindoc.sources.logs.tensorboard import _masked_crc

    rng = random.Random(0)
    t = tag.encode()
    out = bytearray()

    def record(data: bytes) -> None:
        head = struct.pack("<Q", len(data))
        out.extend(head + struct.pack("<I", _masked_crc(head)) + data + struct.pack("<I", _masked_crc(data)))

    def varint(n: int) -> bytes:
        b = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            b.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(b)

    record(b"\x09" + struct.pack("<d", 1.7e9) + b"\x1a\x0dbrain.Event:2")
    value = b"\x0a" + bytes([len(t)]) + t + b"\x15"
    for s in range(points):
        loss = 2.5 * math.exp(-s / (points / 4)) + 0.2 + 0.05 * rng.random()
        val = value + struct.pack("<f", loss)
        summary = b"\x0a" + bytes([len(val)]) + val
        data = (b"\x09" + struct.pack("<d", 1.7e9 + s * 0.01) + (b"\x10" + varint(s) if s else b"")
                + b"\x2a" + bytes([len(summary)]) + summary)
        record(data)
    path.write_bytes(bytes(out))


def user_env(cache: Path, src: Path) -> dict[str, str]:
    """The environment of a user's shell: no thread settings (numpy's BLAS then starts a thread
    per core unless traindoc says otherwise), and compiled bytecode kept as after ``pip install``
    (in ``cache``, so that the source tree stays clean, even where PYTHONDONTWRITEBYTECODE is set)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPYCACHEPREFIX"] = str(cache / "pycache")
    env["PYTHONPATH"] = str(src)
    return env


def end_to_end(path: Path, env: dict[str, str]) -> tuple[float, float, int, str]:
    """Wall time and CPU time (user + system) of ``traindoc logs PATH`` in a fresh interpreter.
    On a shared machine the wall time includes waiting for a CPU; the CPU time does not."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "traindoc", "logs", str(path)], capture_output=True,
                       text=True, env=env, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.returncode, p.stderr


def repeated(path: Path, env: dict[str, str], n: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(n):
        wall, cpu, rc, err = end_to_end(path, env)
        if rc not in (0, 3):
            sys.exit(f"traindoc logs {path} failed (exit {rc}):\n{err[-2000:]}")
        walls.append(wall)
        cpus.append(cpu)
    return walls, cpus


def phases(path: Path) -> dict[str, float]:
    """CPU seconds of each phase in this process (the best of three)."""
    from traindoc.analyze import analyze
    from traindoc.sources import logs

    clock = time.process_time
    best = {"read+map": math.inf, "detectors": math.inf}
    for _ in range(3):
        t0 = clock()
        log = logs.load([path])
        t1 = clock()
        analyze(log.events())
        t2 = clock()
        best = {"read+map": min(best["read+map"], t1 - t0), "detectors": min(best["detectors"], t2 - t1)}
    return best


def check_exact(path: Path) -> str:
    """Every value the CSV reader parsed against float() of its cell, bit for bit."""
    from traindoc.sources import logs

    log = logs.load([path])
    with open(path, encoding="utf-8") as fh:
        header = fh.readline().strip().split(",")
        cells = [line.rstrip("\n").split(",") for line in fh]
    for j, name in enumerate(header[1:], start=1):
        got = log.table.series[name].values
        want = [float(row[j]) for row in cells]
        bad = sum(1 for a, b in zip(got, want) if struct.pack("<d", a) != struct.pack("<d", b))
        if bad or len(got) != len(want):
            return f"{name}: {bad} of {len(want)} values differ from float()"
    return f"all {len(cells) * (len(header) - 1):,} values bit-identical to float()"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5, help="end-to-end runs per log (default 5)")
    ap.add_argument("--no-phases", action="store_true", help="only the end-to-end times")
    ap.add_argument("--check", action="store_true", help="also check every CSV value against float()")
    ap.add_argument("--src", type=Path, default=ROOT / "src",
                    help="the traindoc sources to time (e.g. an unpacked `git archive` of an older commit)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.src))
    cache = Path(tempfile.gettempdir()) / "traindoc-bench"
    cache.mkdir(exist_ok=True)
    csv_path = cache / f"log_{args.rows}.csv"
    tb_path = cache / f"events.out.tfevents.{args.rows}.bench"
    tiny = cache / "tiny.csv"
    tiny.write_text("step,loss\n0,1.0\n1,0.9\n2,0.8\n")
    for path, make in ((csv_path, make_csv), (tb_path, make_tfevents)):
        if not path.exists():
            t0 = time.perf_counter()
            make(path, args.rows)
            print(f"generated {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s")
    env = user_env(cache, args.src)
    end_to_end(tiny, env)  # compiles the bytecode once, as an install does
    print(f"traindoc from {args.src}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} "
          "(a busy machine stretches the wall times; CPU times suffer less)")
    print(f"{'log':30s} {'wall min':>9s} {'wall med':>9s} {'CPU min':>8s} {'CPU med':>8s}")
    for label, path in (("start-up (3-row CSV)", tiny), (f"CSV, {args.rows:,} rows", csv_path),
                        (f"TensorBoard, {args.rows:,} points", tb_path)):
        walls, cpus = repeated(path, env, args.repeat)
        print(f"{label:30s} {min(walls):8.2f}s {statistics.median(walls):8.2f}s "
              f"{min(cpus):7.2f}s {statistics.median(cpus):7.2f}s")
    if not args.no_phases:
        for label, path in (("CSV", csv_path), ("TensorBoard", tb_path)):
            ph = phases(path)
            print(f"{label:12s} in-process CPU: read+map {ph['read+map']:.2f} s, detectors {ph['detectors']:.2f} s")
    print(f"load average now {os.getloadavg()[0]:.1f}")
    if args.check:
        print("exact parsing:", check_exact(csv_path))


if __name__ == "__main__":
    main()
