"""``traindoc demo``: three small training scripts under ``traindoc run``, with the diagnosis of each.

A seed-000-style training that masks NaN losses with a constant, a seed-002-style bf16 model
whose weights never move, and a healthy twin (bf16 autocast with fp32 parameters).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from traindoc.cases import demo_cases

CASES = ("nan_masked_loss", "bf16_master", "healthy_bf16_autocast")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--case", action="append", choices=[c.name for c in demo_cases()],
                        help="run only this case (repeatable)")


def run(args: argparse.Namespace) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cases = {c.name: c for c in demo_cases()}
    # The scripts run from a folder of their own, as a user's train.py would (not from inside
    # the installed package, whose files traindoc does not count as the user's code).
    with tempfile.TemporaryDirectory(prefix="traindoc-demo-") as folder:
        for name in args.case or CASES:
            case = cases[name]
            script = Path(folder) / case.path.name
            shutil.copyfile(case.path, script)
            sys.stderr.write(f"\n$ traindoc run {script.name}    # {case.summary}\n")
            sys.stderr.flush()
            # The script's own prints go to /dev/null; traindoc's live lines and report to stderr.
            subprocess.run([sys.executable, "-m", "traindoc", "run", script.name],
                           stdout=subprocess.DEVNULL, env=env, cwd=folder, check=False)
    return 0
