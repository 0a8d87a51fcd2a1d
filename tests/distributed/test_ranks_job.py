"""The distributed doctor under torchrun: one report for the job, per-rank recordings, and the
guarantees (no deadlock, no change to the training, --guard refused)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import torch

from conftest import ENV, ROOT, run

JOB = Path(__file__).resolve().parent / "scripts" / "ranks_job.py"
TIMEOUT = 240  # a hang fails the test instead of the suite


def torchrun(*args: str, env: dict[str, str] | None = None, nproc: int = 2,
             traindoc: bool = True) -> subprocess.CompletedProcess[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
    target = ["-m", "traindoc", "run", *args] if traindoc else list(args)
    return run([*launcher, *target], timeout=TIMEOUT, env={**ENV, **(env or {})}, cwd=ROOT)


def test_uneven_step_counts_end_with_one_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    out = torchrun("--json", str(report), str(JOB), "--steps", "30", "--fewer", "12")
    assert out.returncode == 0, out.stderr[-3000:]
    run = json.loads(report.read_text())["run"]
    assert run["world_size"] == 2 and run["backend"] == "gloo"
    assert run["rank_steps"] == [30, 18] and run["rank_status"] == ["ok", "ok"]
    assert out.stderr.count("traindoc report") == 1


def test_a_rank_that_raises_never_hangs_the_others(tmp_path: Path) -> None:
    out = torchrun(str(JOB), "--solo", "--raise-at", "5")
    assert out.returncode != 0
    assert "rank 1 failed on purpose" in out.stderr


def test_a_rank_that_vanishes_costs_rank_0_the_timeout_only(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    out = torchrun("--json", str(report), str(JOB), "--solo", "--vanish-at", "5",
                   env={"TRAINDOC_RANKS_TIMEOUT": "2"})
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["run"]["rank_status"] == ["ok", "unknown"]
    assert any(d["id"] == "ranks" and "rank(s) 1 did not report" in d["error"] for d in data["disabled"])


def test_nan_on_one_rank_only_is_reported_for_that_rank(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    out = torchrun("--json", str(report), str(JOB), "--solo", "--nan-at", "3")
    assert out.returncode == 0, out.stderr[-3000:]
    found = {f["id"]: f for f in json.loads(report.read_text())["findings"]}
    assert found["nonfinite"]["step"] == 3 and found["nonfinite"]["evidence"]["ranks"] == [1]
    assert found["nonfinite"]["message"].startswith("on rank 1 (not rank 0)")


def test_per_rank_records_merge_into_one_report(tmp_path: Path) -> None:
    rec, live = tmp_path / "rec", tmp_path / "live.json"
    out = torchrun("--record", str(rec), "--json", str(live), str(JOB), "--solo", "--fewer", "4")
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(p.name for p in rec.iterdir()) == ["rank0.jsonl", "rank1.jsonl"]
    merged = tmp_path / "merged.json"
    ran = subprocess.run([sys.executable, "-m", "traindoc", "analyze", str(rec), "--json", str(merged)],
                         capture_output=True, text=True, env=ENV, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    a, b = json.loads(live.read_text()), json.loads(merged.read_text())
    assert b["run"]["world_size"] == 2 and b["run"]["rank_steps"] == [20, 16]
    assert [(f["id"], f["step"]) for f in a["findings"]] == [(f["id"], f["step"]) for f in b["findings"]]


def test_same_parameters_on_every_rank_with_and_without_traindoc(tmp_path: Path) -> None:
    bare, watched = tmp_path / "bare", tmp_path / "watched"
    bare.mkdir(), watched.mkdir()
    assert torchrun(str(JOB), "--save-dir", str(bare), traindoc=False).returncode == 0
    out = torchrun(str(JOB), "--save-dir", str(watched))
    assert out.returncode == 0, out.stderr[-3000:]
    for rank in (0, 1):
        a, b = torch.load(bare / f"rank{rank}.pt"), torch.load(watched / f"rank{rank}.pt")
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)), (rank, k)


def test_guard_is_refused_with_several_ranks() -> None:
    out = torchrun("--guard", str(JOB))
    assert out.returncode != 0
    assert "Error: --guard works on one process only, and this job has 2 ranks" in out.stderr
    assert "src/traindoc" not in out.stderr  # one line of ours, no traceback (torchrun prints its own)


def test_two_nodes_sharing_a_rendezvous_give_one_report(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    report = tmp_path / "r.json"
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
               "--node_rank", str(node), "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
               "--rdzv_id", "traindoc-test", "-m", "traindoc", "run", "--json", str(report), str(JOB), "--solo"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=ENV, cwd=ROOT))
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert sum(o[1].count("traindoc report") for o in outs) == 1
    assert json.loads(report.read_text())["run"]["world_size"] == 2
