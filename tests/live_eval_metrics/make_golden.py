"""Writes the golden event streams in ``golden/``: real live runs of the zoo cases whose
metrics are only printed, filtered to the scalars the metric detectors read.

Each stream is recorded with ``traindoc run --record`` and keeps the run's first and last events
and every ``scalar`` event (the training loss, the printed metrics, the measured ``val_*``), so
the detectors' examples replay exactly what a live run produced, without torch. Run
``python tests/live_eval_metrics/make_golden.py`` after changing the probe; the .jsonl files are
committed.
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
KINDS = {"run_start", "run_end", "scalar"}

STREAMS = {
    "val_at_chance_printed": ZOO / "val_at_chance_label_order.py",
    "val_at_chance_derived": HERE / "scripts" / "label_order_silent.py",
    "healthy_label_order": ZOO / "healthy_label_order.py",
    "degenerate_threshold_sparse": ZOO / "degenerate_threshold_sparse.py",
    "healthy_sparse_threshold": ZOO / "healthy_sparse_threshold.py",
}


def keep(event: dict[str, object]) -> bool:
    return event["kind"] in KINDS and event.get("name") not in ("grad_norm", "lr")


def record(name: str, script: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "run.jsonl"
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
