"""Writes the golden event streams in ``golden/``: real live runs, filtered to what the loop,
evaluation and data detectors read.

Each stream is recorded with ``traindoc run --record`` from a zoo case (or a script in
``scripts/``) and keeps the run's first and last events and the events of the signals below, so
the detectors' examples replay exactly what a live run produced, without torch. Run
``python tests/live/make_golden.py`` after changing a probe; the .jsonl files are committed.
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
SIGNALS = {"scheduler_step", "grad_accumulation", "eval_pass", "loader_wait", "batchnorm_state",
           "run_start", "run_end"}

STREAMS = {
    "onecycle_prestep": ZOO / "onecycle_prestep.py",
    "amp_skipped_first_step": HERE / "scripts" / "amp_skipped_first_step.py",
    "unscaled_accumulation": ZOO / "unscaled_accumulation.py",
    "healthy_accumulation": ZOO / "healthy_accumulation.py",
    "missing_zero_grad": ZOO / "missing_zero_grad.py",
    "eval_train_mode": ZOO / "eval_train_mode.py",
    "nondeterministic_eval": ZOO / "nondeterministic_eval.py",
    "healthy_eval": ZOO / "healthy_cnn_bn.py",
    "slow_eval": ZOO / "slow_eval.py",
    "data_starvation": ZOO / "data_starvation.py",
}


def keep(event: dict[str, object]) -> bool:
    kind = event["kind"]
    return kind in SIGNALS or (kind == "scalar" and event.get("name") == "lr")


def record(name: str, script: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "run.jsonl"
        # The exit code is 1 when the run has findings: the stream is what matters.
        ran = subprocess.run([sys.executable, "-m", "traindoc", "run", "--record", str(raw), str(script)],
                             env=env, capture_output=True, text=True)
        if not raw.exists() or ran.returncode not in (0, 1):
            raise SystemExit(f"{script.name}: traindoc run failed\n{ran.stderr[-3000:]}")
        lines = [line for line in raw.read_text().splitlines() if keep(json.loads(line))]
    (HERE / "golden" / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    (HERE / "golden").mkdir(exist_ok=True)
    for name, script in STREAMS.items():
        record(name, script)
        print(f"golden/{name}.jsonl")


if __name__ == "__main__":
    main()
