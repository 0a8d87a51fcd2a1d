"""`accelerate launch -m traindoc run` on two CPU processes (gloo): the training is the same bit
for bit on each rank, one report covers both ranks, and a clip on the main process only is
`rank-divergence`."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import ENV, ROOT, run, torch_exit_abort

SCRIPT = Path(__file__).resolve().parent / "accelerate_train.py"
pytestmark = pytest.mark.skipif(shutil.which("accelerate") is None, reason="needs accelerate's launcher")


def launch(*args: str, traindoc: bool = True) -> subprocess.CompletedProcess[str]:
    with socket.socket() as s:  # not accelerate's default 29500: tests run side by side
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port)]
    target = ["-m", "traindoc", "run", *args] if traindoc else list(args)
    out = run([*launcher, *target], timeout=240, env=ENV, cwd=ROOT)
    assert out.returncode == 0 or torch_exit_abort(out), out.stderr[-3000:]
    return out


def test_two_processes_train_the_same_and_give_one_quiet_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    launch(str(SCRIPT), "--save", str(tmp_path / "bare"), traindoc=False)
    launch("--json", str(report), str(SCRIPT), "--save", str(tmp_path / "watched"))
    for rank in (0, 1):
        a, b = torch.load(tmp_path / f"bare.rank{rank}"), torch.load(tmp_path / f"watched.rank{rank}")
        assert all(torch.equal(a[k], b[k]) for k in a), rank
    data = json.loads(report.read_text())
    assert data["run"]["world_size"] == 2 and data["run"]["rank_steps"] == [48, 48]
    assert [f["id"] for f in data["findings"] if f["severity"] != "info"] == []


def test_clipping_on_the_main_process_only_is_rank_divergence(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    launch("--json", str(report), str(SCRIPT), "--clip-main-only")
    found = {f["id"]: f for f in json.loads(report.read_text())["findings"]}
    assert "rank-divergence" in found
    assert found["rank-divergence"]["step"] == 0
