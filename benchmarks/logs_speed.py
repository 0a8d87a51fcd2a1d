"""How fast is ``traindoc logs`` on big logs? End to end, as a user runs it.

    python benchmarks/logs_speed.py              # 1,000,000 rows / points
    python benchmarks/logs_speed.py --rows 200000

Generates (once, cached in a temp folder) a 1,000,000-row CSV (step, loss, lr, grad_norm) and
a 1,000,000-point TensorBoard event file (one scalar tag, written in SummaryWriter.add_scalar's
exact record layout by a small writer here: SummaryWriter itself needs ~100 s for 1M points),
then times ``python -m traindoc logs FILE`` in a fresh interpreter (start-up included) and the
phases inside one process (read, map, analyze). Target: under 3 s each.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


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


def end_to_end(path: Path) -> tuple[float, float, int, str]:
    """Wall time and CPU time (user + system) of ``traindoc logs PATH`` in a fresh interpreter.
    On a shared machine the wall time includes waiting for a CPU; the CPU time does not."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "traindoc", "logs", str(path)], capture_output=True,
                       text=True, env=env, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.returncode, p.stderr


def phases(path: Path) -> dict[str, float]:
    """CPU seconds of each phase in this process."""
    from traindoc.analyze import analyze
    from traindoc.sources import logs

    clock = time.process_time
    t0 = clock()
    log = logs.load([path])
    t1 = clock()
    events = list(log.events())
    t2 = clock()
    analyze(events)
    t3 = clock()
    return {"read+map": t1 - t0, "events": t2 - t1, "detectors": t3 - t2, "n_events": float(len(events))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--no-phases", action="store_true", help="only the end-to-end times")
    args = ap.parse_args()
    cache = Path(tempfile.gettempdir()) / "traindoc-bench"
    cache.mkdir(exist_ok=True)
    csv_path = cache / f"log_{args.rows}.csv"
    tb_path = cache / f"events.out.tfevents.{args.rows}.bench"
    for path, make in ((csv_path, make_csv), (tb_path, make_tfevents)):
        if not path.exists():
            t0 = time.perf_counter()
            make(path, args.rows)
            print(f"generated {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"load average {os.getloadavg()[0]:.1f} (a busy machine stretches the wall times)")
    for label, path in (("CSV", csv_path), ("TensorBoard", tb_path)):
        wall, cpu, rc, err = end_to_end(path)
        verdict = "ok" if wall < 3.0 else "over the 3 s target"
        print(f"{label:12s} {args.rows:>9,} rows/points: traindoc logs end to end {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU (exit {rc}; {verdict})")
        if rc not in (0, 3):
            print(err[-2000:])
        if not args.no_phases:
            ph = phases(path)
            print(f"{'':12s} CPU by phase: read+map {ph['read+map']:.2f} s, events {ph['events']:.2f} s "
                  f"({int(ph['n_events']):,}), detectors {ph['detectors']:.2f} s")


if __name__ == "__main__":
    main()
