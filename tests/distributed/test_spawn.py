"""Scripts that start their own ranks with torch.multiprocessing.spawn, under `traindoc run`."""

from __future__ import annotations

import json
from pathlib import Path

import zoo_cases as zoo
from conftest import traindoc

TIMEOUT = 240


def test_spawned_children_record_one_stream_each_and_rank_0_reports(tmp_path: Path) -> None:
    rec, report = tmp_path / "rec", tmp_path / "r.json"
    out = traindoc("run", "--record", str(rec), "--json", str(report),
                   str(zoo.case("ddp_ema_rank0").path), "--steps", "12", timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "internal error" not in out.stderr
    assert sorted(p.name for p in rec.iterdir()) == ["rank0.jsonl", "rank1.jsonl"]
    data = json.loads(report.read_text())
    assert data["run"]["world_size"] == 2 and data["run"]["rank_steps"] == [12, 12]
    assert [(f["id"], f["evidence"]["ranks"]) for f in data["findings"]] == [("rank-divergence", [1])]
    assert out.stderr.count("traindoc report") == 1
    merged = tmp_path / "m.json"
    assert traindoc("analyze", str(rec), "--json", str(merged)).returncode == 0
    assert [f["id"] for f in json.loads(merged.read_text())["findings"]] == ["rank-divergence"]


def test_guard_is_refused_when_the_script_spawns_several_ranks() -> None:
    out = traindoc("run", "--guard", str(zoo.case("healthy_ddp_ema").path), "--steps", "4", timeout=TIMEOUT)
    assert out.returncode == 1
    assert "--guard works on one process only, and this job has 2 ranks" in out.stderr
    assert "Traceback" not in out.stderr
