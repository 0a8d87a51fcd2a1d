"""How fast is `traindoc lint`? Target: >= 20,000 lines/second on one core.

Builds a corpus of training scripts by copying the healthy lint corpus (tests/lint_corpus) and
the failure zoo into a temporary directory until it holds about --lines lines, lints it in this
process (best of --repeat runs, so disk cache and import time are not counted) and prints
lines/second, by wall clock and by CPU time of this process. The pass/fail line uses CPU time,
which does not count time spent waiting for a core on a busy machine; on an idle machine the
two agree. It also times a cold `python -m traindoc.lint` on one file (start-up, no torch).

    python benchmarks/lint_speed.py [--lines 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "tests" / "lint_corpus", ROOT / "zoo"]
TARGET = 20_000  # lines per second


def build_corpus(directory: Path, lines: int) -> tuple[int, int]:
    """Copy the source scripts into ``directory`` (in numbered sub-folders) until ``lines``."""
    scripts = [p for src in SOURCES if src.is_dir() for p in sorted(src.glob("*.py"))]
    total = files = copy = 0
    while total < lines:
        folder = directory / f"copy{copy:03d}"
        folder.mkdir()
        for script in scripts:
            shutil.copy(script, folder / script.name)
            total += len(script.read_text().splitlines())
            files += 1
        copy += 1
    return total, files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from traindoc.lint import lint_paths

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp)
        lines, files = build_corpus(corpus, args.lines)
        wall = cpu = float("inf")
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            result = lint_paths([corpus], use_config=False)
            wall = min(wall, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        rate = lines / cpu
        print(f"corpus: {lines:,} lines in {files} files ({len(result.findings)} findings)")
        print(f"lint, wall clock: {wall:.2f} s, {lines / wall:,.0f} lines/s")
        print(f"lint, CPU time:   {cpu:.2f} s, {rate:,.0f} lines/s (target {TARGET:,}: "
              f"{'pass' if rate >= TARGET else 'FAIL'})")

        one = corpus / "copy000" / "cifar_amp_resnet.py"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "traindoc.lint", str(one)], check=False, capture_output=True)
        print(f"cold start, one file: {time.perf_counter() - t0:.2f} s")
    return 0 if rate >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
