"""Writes the golden streams in golden/ by recording zoo cases live, keeping only the events the
mixed-precision detectors read (so the files stay small and replay without torch).

Run `OMP_NUM_THREADS=1 python tests/live_amp_ckpt/make_golden.py` after changing a probe or a zoo
case; the .jsonl files are committed so that the detector examples replay exactly these runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
import zoo_cases as zoo  # noqa: E402

HERE = Path(__file__).parent / "golden"
KEEP = {"run_start", "autocast_check", "grad_scale", "scaled_clip", "run_end"}
STREAMS = {
    "autocast_outside.jsonl": "amp_autocast_bypassed",
    "autocast_applied.jsonl": "healthy_amp",
}


def record(case: str, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.jsonl"
        subprocess.run([sys.executable, "-m", "traindoc", "run", "--record", str(raw), str(zoo.case(case).path)],
                       check=True, capture_output=True)
        lines = []
        for line in raw.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event["kind"] not in KEEP:
                continue
            if event["kind"] == "run_start":  # no machine-specific paths or times
                event.update(script=f"zoo/{case}.py", started=0.0, python="", torch="")
            if event["kind"] == "run_end":
                event["duration_s"] = 0.0
            lines.append(json.dumps(event, separators=(",", ":")))
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    HERE.mkdir(exist_ok=True)
    for name, case in STREAMS.items():
        record(case, HERE / name)
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
