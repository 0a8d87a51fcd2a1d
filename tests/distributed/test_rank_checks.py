"""The cross-rank checks on real two-rank gloo jobs, past what the zoo's expectation lines say:
which rank and why (rank-loss-skew, the straggler's data or compute), tensor-parallel clipping
on local shards, and TRAINDOC=1 on a script that calls mp.spawn (one report for the job)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import zoo_cases as zoo
from conftest import ENV, ROOT, run, traindoc

JOB = Path(__file__).resolve().parent / "scripts" / "ranks_job.py"
TIMEOUT = 240  # a hang fails the test instead of the suite


def run_case(name: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    report = tmp_path / "r.json"
    out = traindoc("run", "--json", str(report), str(zoo.case(name).path), *args, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    data: dict[str, Any] = json.loads(report.read_text())
    assert data["disabled"] == [] and data["run"]["rank_steps"] == [data["run"]["steps"]] * 2, data["run"]
    return data


def found(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in data["findings"] if f["severity"] in ("error", "warning")}


def test_the_rank_trained_on_a_mislabeled_shard_is_named(tmp_path: Path) -> None:
    skew = found(run_case("ddp_rank_mislabeled_shard", tmp_path))["rank-loss-skew"]
    ev = skew["evidence"]
    assert ev["ranks"] == [1] and ev["side"] == "above" and ev["share"] >= 0.9
    assert ev["median_by_rank"]["1"] > 1.3 * ev["median_by_rank"]["0"]
    assert skew["message"].startswith("rank 1's loss was above the other rank's on ")


def test_ranks_on_different_random_shards_stay_quiet(tmp_path: Path) -> None:
    data = run_case("healthy_ddp_shards", tmp_path)
    assert "rank-loss-skew" in data["ran"] and found(data) == {}


def test_a_straggler_waiting_on_its_data_is_told_so(tmp_path: Path) -> None:
    slow = found(run_case("ddp_straggler_slow_data", tmp_path))["straggler-rank"]
    ev = slow["evidence"]
    assert ev["slow_rank"] == 1 and ev["slow_part"] == "data"
    assert ev["data_ms"] > 3 * ev["others_data_ms"]
    assert "slow because of its data" in slow["message"] and "DataLoader" in slow["cause"]


def test_a_straggler_slow_in_its_own_work_is_told_so_beside_its_dataloader(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    out = run([*launcher, "-m", "traindoc", "run", "--json", str(report), str(JOB), "--loader", "--steps", "80", "--extra-ms", "15"],
              timeout=TIMEOUT, env=ENV, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    ev = found(json.loads(report.read_text()))["straggler-rank"]["evidence"]
    assert ev["slow_rank"] == 1 and ev["slow_part"] == "compute"
    assert ev["compute_ms"] - ev["data_ms"] > 10 and ev["data_ms"] < 5


def test_tensor_parallel_clipping_on_local_shards_fires_at_its_first_step(tmp_path: Path) -> None:
    div = found(run_case("tp_clip_local_norm", tmp_path))["rank-divergence"]
    assert div["step"] == 0 and div["evidence"]["ranks"] == [1]
    assert {"norm.weight", "norm.bias"} <= set(div["evidence"]["tensors"])
    assert div["evidence"]["sharded"] == 3  # the shards differ by design and are not compared


def test_tensor_parallel_clipping_over_every_shard_stays_quiet(tmp_path: Path) -> None:
    data = run_case("healthy_tp_clip", tmp_path)
    assert "rank-divergence" in data["ran"] and found(data) == {}


def test_traindoc_1_on_an_mp_spawn_script_gives_one_report_for_the_job(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    env = {**ENV, "TRAINDOC": "1", "TRAINDOC_JSON": str(report)}
    env.pop("RANK", None)
    out = run([sys.executable, str(zoo.case("ddp_ema_rank0").path), "--steps", "12"], timeout=TIMEOUT, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.count("traindoc report") == 1  # the parent's: rank 0's, with the others merged
    data = json.loads(report.read_text())
    assert data["run"]["world_size"] == 2 and data["run"]["rank_steps"] == [12, 12]
    assert [(f["id"], f["evidence"]["ranks"]) for f in data["findings"]] == [("rank-divergence", [1])]
