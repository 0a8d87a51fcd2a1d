"""torchrun: each rank observes itself, rank 0 reports for the job (tests/distributed/ has the rest)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import zoo_cases as zoo
from conftest import ENV, run


def test_torchrun_two_ranks(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    out = run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "traindoc", "run", "--json", str(report), str(zoo.case("healthy_ddp").path), "--steps", "30"],
        env=ENV, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["run"]["ranks"] == 2 and data["run"]["steps"] == 30
    assert data["run"]["backend"] == "gloo" and data["run"]["rank_steps"] == [30, 30]
    assert "rank-divergence" in data["ran"] and data["disabled"] == []
    assert [f["id"] for f in data["findings"] if f["severity"] != "info"] == []
    assert out.stderr.count("traindoc report") == 1  # only rank 0 reports
