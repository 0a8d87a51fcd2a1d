"""DeepSpeed on its CPU accelerator, under ``traindoc run``: the engine's own clipping is seen
(its ``clip_grad_norm_`` without ZeRO, the norm its ZeRO and bf16 optimizers keep), and its
bf16 optimizer's fp32 master copies are not mistaken for a mismatch: the step it takes inside
``deepspeed.initialize`` on zero gradients (to allocate the optimizer's state) is not a
training step, and the model's parameters it updates through copies are held.

The script is zoo/deepspeed_unscaled_targets.py (raw house prices as targets: every step is
clipped by ~1e6x); ``--fixed`` standardizes the targets and must stay quiet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "zoo" / "deepspeed_unscaled_targets.py"
CONFIGS = {"zero0-bf16": ["--bf16"], "zero1": ["--zero-stage", "1"], "zero2-bf16": ["--zero-stage", "2", "--bf16"]}


def run(tmp_path: Path, *args: str) -> dict:
    report = tmp_path / "r.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ran = subprocess.run([sys.executable, "-m", "traindoc", "run", "--json", str(report), str(SCRIPT),
                          "--epochs", "1", *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    data: dict = json.loads(report.read_text())
    assert data["disabled"] == [], data["disabled"]
    return data


def serious(data: dict) -> dict[str, int]:
    return {f["id"]: f["step"] for f in data["findings"] if f["severity"] in ("error", "warning")}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_healthy_deepspeed_run_stays_quiet(config: str, tmp_path: Path) -> None:
    data = run(tmp_path, "--fixed", *CONFIGS[config])
    assert serious(data) == {}
    assert data["run"]["optimizer_steps"] == 32  # 1024 rows / 32: the setup step is not one


@pytest.mark.parametrize("config", ["zero0-bf16", "zero2-bf16"])
def test_deepspeed_clipping_every_step_is_found(config: str, tmp_path: Path) -> None:
    data = run(tmp_path, *CONFIGS[config])
    found = serious(data)
    assert found.get("clipping-every-step") == 0, found
    clip = next(f for f in data["findings"] if f["id"] == "clipping-every-step")
    assert clip["message"].startswith("DeepSpeed's gradient_clipping (max_norm=1)")
    assert clip["evidence"]["median_ratio"] > 1e4  # the norm DeepSpeed measured, before clipping


def test_bf16_master_copies_are_named_after_the_model(tmp_path: Path) -> None:
    data = run(tmp_path, *CONFIGS["zero0-bf16"])
    exploding = next(f for f in data["findings"] if f["id"] == "exploding-gradients")
    assert all(w.startswith("module.") for w in exploding["where"]), exploding["where"]
