"""``traindoc demo``: three zoo cases under ``traindoc run``, with the diagnosis of each.

A seed-000-style training that masks NaN losses with a constant, a seed-002-style bf16 model
whose weights never move, and a healthy twin (bf16 autocast with fp32 parameters).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from traindoc import zoo

CASES = ("nan_masked_loss", "bf16_master", "healthy_bf16_autocast")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--case", action="append", choices=[c.name for c in zoo.cases()],
                        help="run this zoo case instead (repeatable)")


def run(args: argparse.Namespace) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for name in args.case or CASES:
        case = zoo.case(name)
        sys.stderr.write(f"\n$ traindoc run {case.path.name}    # {case.summary}\n")
        sys.stderr.flush()
        # The script's own prints go to /dev/null; traindoc's live lines and report to stderr.
        subprocess.run([sys.executable, "-m", "traindoc", "run", str(case.path)],
                       stdout=subprocess.DEVNULL, env=env, check=False)
    return 0
