"""Start-up cost of `traindoc run` against `python`, on a script that only imports torch and
on an empty one: the median wall time of N fresh interpreters each.

    python benchmarks/startup.py --runs 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def median_wall(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        scripts = {"empty script": Path(d) / "empty.py", "import torch": Path(d) / "imports.py"}
        scripts["empty script"].write_text("")
        scripts["import torch"].write_text("import torch\n")
        print(f"load average {os.getloadavg()[0]:.1f}")
        print("| script | python | traindoc run | added |")
        print("|---|---|---|---|")
        for name, path in scripts.items():
            bare = median_wall([sys.executable, str(path)], args.runs)
            ours = median_wall([sys.executable, "-m", "traindoc", "run", str(path)], args.runs)
            print(f"| {name} | {bare:.2f} s | {ours:.2f} s | {ours - bare:+.2f} s |")


if __name__ == "__main__":
    main()
