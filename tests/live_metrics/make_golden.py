"""Regenerate the golden streams of loss-term-imbalance from zoo cases.

    OMP_NUM_THREADS=1 python tests/live_metrics/make_golden.py

Each stream is recorded with ``traindoc run --record`` and cut down to the events the
detector reads (``loss_term``) between ``run_start`` and ``run_end``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
ZOO = HERE.parents[1] / "zoo"
STREAMS = {"loss_term_imbalance.jsonl": "loss_term_imbalance.py", "healthy_moe_terms.jsonl": "healthy_moe.py"}
KEEP = {"run_start", "loss_term", "run_end"}


def main() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for out, script in STREAMS.items():
        with tempfile.TemporaryDirectory() as tmp:
            rec = Path(tmp) / "rec.jsonl"
            subprocess.run([sys.executable, "-m", "traindoc", "run", "--record", str(rec), str(ZOO / script)],
                           check=True, env=env, capture_output=True)
            lines = [line.replace(str(ZOO.parents[2]) + "/", "") for line in rec.read_text().splitlines()
                     if json.loads(line)["kind"] in KEEP]
        (HERE / "golden" / out).write_text("\n".join(lines) + "\n")
        print(f"{out}: {len(lines)} events")


if __name__ == "__main__":
    main()
