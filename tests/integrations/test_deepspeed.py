"""DeepSpeed on its CPU accelerator, under ``traindoc run``: the engine's own clipping is seen
(its ``clip_grad_norm_`` without ZeRO, the norm its ZeRO and bf16 optimizers keep), and its
bf16 optimizer's fp32 master copies are not mistaken for a mismatch: the step it takes inside
``deepspeed.initialize`` on zero gradients (to allocate the optimizer's state) is not a
training step, and the model's parameters it updates through copies are held.

ZeRO's optimizer steps flat partitions of all the parameters: they are measured as the
parameters they hold, under the model's names, so a head that gets no gradient is seen
(zoo/deepspeed_zero_aux_head_detached.py, ZeRO-2 in the zoo's own run, stages 1 and 3 here).

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
DETACHED = ROOT / "zoo" / "deepspeed_zero_aux_head_detached.py"
CONFIGS = {"zero0-bf16": ["--bf16"], "zero1": ["--zero-stage", "1"], "zero2-bf16": ["--zero-stage", "2", "--bf16"],
           "zero3": ["--zero-stage", "3"]}
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run(tmp_path: Path, *args: str, script: Path = SCRIPT) -> dict:
    report = tmp_path / "r.json"
    more = ["--epochs", "1"] if script == SCRIPT else []
    ran = subprocess.run([sys.executable, "-m", "traindoc", "run", "--json", str(report), str(script),
                          *more, *args], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    data: dict = json.loads(report.read_text())
    assert data["disabled"] == [], data["disabled"]
    return data


def defined(script: Path, text: str) -> str:
    """The ``file:line`` a live finding gives for the layer ``script`` assigns in ``text``."""
    line = next(i for i, source in enumerate(script.read_text().splitlines(), 1) if text in source)
    return f"{script}:{line}"


def serious(data: dict) -> dict[str, int]:
    return {f["id"]: f["step"] for f in data["findings"] if f["severity"] in ("error", "warning")}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_healthy_deepspeed_run_stays_quiet(config: str, tmp_path: Path) -> None:
    data = run(tmp_path, "--fixed", *CONFIGS[config])
    assert serious(data) == {}
    assert data["run"]["optimizer_steps"] == 32  # 1024 rows / 32: the setup step is not one


@pytest.mark.parametrize("config", ["zero0-bf16", "zero2-bf16", "zero3"])
def test_deepspeed_clipping_every_step_is_found(config: str, tmp_path: Path) -> None:
    data = run(tmp_path, *CONFIGS[config])
    found = serious(data)
    assert found.get("clipping-every-step") == 0, found
    clip = next(f for f in data["findings"] if f["id"] == "clipping-every-step")
    assert clip["message"].startswith("DeepSpeed's gradient_clipping (max_norm=1)")
    assert clip["evidence"]["median_ratio"] > 1e4  # the norm DeepSpeed measured, before clipping
    # bf16 master copies, and ZeRO's flat partitions, are named after the model's parameters:
    # the norm is in the output layer (module.4), not in "group0.param0[4801]"
    exploding = next(f for f in data["findings"] if f["id"] == "exploding-gradients")
    assert exploding["where"][0] == "module.4.weight", exploding["where"]
    assert all(w.startswith("module.") for w in exploding["where"]), exploding["where"]


@pytest.mark.parametrize("stage", ["1", "3"])
def test_a_head_without_gradient_is_seen_inside_zero_partitions(stage: str, tmp_path: Path) -> None:
    data = run(tmp_path, "--zero-stage", stage, "--steps", "12", script=DETACHED)
    assert serious(data) == {"no-gradient": 0}
    found = next(f for f in data["findings"] if f["id"] == "no-gradient")
    assert found["where"] == ["module.length_head.weight", "module.length_head.bias",
                              defined(DETACHED, "self.length_head =")]


def test_zero3_trains_the_same_watched(tmp_path: Path) -> None:
    """Measuring pieces of the flat partition (views of it) changes nothing DeepSpeed steps."""
    bare = subprocess.run([sys.executable, str(DETACHED), "--zero-stage", "3", "--fixed", "--steps", "12",
                           "--save", str(tmp_path / "bare.pt")], capture_output=True, text=True, env=ENV,
                          cwd=tmp_path, timeout=600)
    assert bare.returncode == 0, bare.stderr[-3000:]
    data = run(tmp_path, "--zero-stage", "3", "--fixed", "--steps", "12", "--save", str(tmp_path / "seen.pt"),
               script=DETACHED)
    assert serious(data) == {}
    import torch

    a, b = torch.load(tmp_path / "bare.pt"), torch.load(tmp_path / "seen.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_zero3_partitions_on_two_ranks_are_named(tmp_path: Path) -> None:
    """On two ranks each holds part of every parameter (the last rank's padded, and none of a
    one-element bias): both ranks' pieces carry the model's names into one report."""
    report = tmp_path / "r.json"
    ran = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          "--master_port", free_port(), "-m", "traindoc", "run", "--json", str(report), str(DETACHED),
                          "--zero-stage", "3", "--steps", "12"], capture_output=True, text=True, env=ENV,
                         cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    data = json.loads(report.read_text())
    assert serious(data) == {"no-gradient": 0}
    found = next(f for f in data["findings"] if f["id"] == "no-gradient")
    assert found["where"] == ["module.length_head.weight", "module.length_head.bias",
                              defined(DETACHED, "self.length_head =")]


@pytest.mark.parametrize("stage,fixed,found", [("1", True, {}), ("2", False, {"no-gradient": 0})])
def test_zero_offloaded_to_the_cpu(stage: str, fixed: bool, found: dict, tmp_path: Path) -> None:
    """With the optimizer offloaded (DeepSpeedExamples' HelloDeepSpeed configures it), ZeRO's
    flat partition keeps its gradient buffer from step to step and overwrites it: the engine
    clears the model's gradients itself, which is not missing-zero-grad."""
    data = run(tmp_path, "--zero-stage", stage, "--offload", "--steps", "12", *(["--fixed"] if fixed else []),
               script=DETACHED)
    assert serious(data) == found


def test_a_zero_checkpoint_holds_its_optimizer_beside_the_model_states(tmp_path: Path) -> None:
    """engine.save_checkpoint writes the model's states and, under ZeRO, the optimizer's state in
    a file of its own beside them: one checkpoint, seen saved and read back; it is incomplete
    only when that file is missing."""
    from traindoc.cli import main

    data = run(tmp_path, "--zero-stage", "2", "--fixed", "--steps", "12", "--checkpoint-dir", str(tmp_path / "ck"),
               script=DETACHED)
    assert serious(data) == {}
    assert "checkpoint-incomplete" in data["ran"]
    folder = tmp_path / "ck" / "global_step12"

    def inspect(*flags: str) -> dict:
        assert main(["ckpt", "inspect", "--json", str(tmp_path / "c.json"), *flags, str(folder)]) == 0
        report: dict = json.loads((tmp_path / "c.json").read_text())
        return report

    read = inspect()
    assert read["run"]["checkpoint"]["format"] == "deepspeed"
    assert read["run"]["checkpoint"]["has"] == ["model", "optimizer", "step"]
    assert serious(read) == {}
    assert [row["lr"] for row in inspect("--trust")["run"]["checkpoint"]["lrs"]] == [0.002]  # ZeRO's file
    (folder / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink()
    alone = inspect()
    assert "optimizer" in alone["run"]["checkpoint"]["missing"]
    assert "checkpoint-incomplete" in serious(alone)


HF_SCRIPT = ROOT / "tests" / "integrations" / "hf_train.py"
ACCELERATE_SCRIPT = ROOT / "tests" / "integrations" / "accelerate_deepspeed_train.py"


@pytest.mark.parametrize("detach, found", [(False, {}), (True, {"no-gradient": 0})])
def test_accelerate_deepspeed_plugin(detach: bool, found: dict, tmp_path: Path) -> None:
    """Accelerate's loop over a ZeRO-3 engine (its DeepSpeed plugin): one step per
    optimizer.step(), and the detached head named inside ZeRO's partition."""
    report = tmp_path / "r.json"
    ran = subprocess.run([sys.executable, "-m", "traindoc", "run", "--json", str(report), str(ACCELERATE_SCRIPT),
                          *(["--detach"] if detach else [])], capture_output=True, text=True,
                         env={**ENV, "TEST_PORT": free_port()}, cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    data = json.loads(report.read_text())
    assert serious(data) == found
    assert data["run"]["optimizer_steps"] == 64
    if detach:
        assert next(f for f in data["findings"] if f["id"] == "no-gradient")["where"] == [
            "module.aux.weight", "module.aux.bias", defined(ACCELERATE_SCRIPT, "self.aux =")]


@pytest.mark.parametrize("stage, bug, expected", [
    ("3", "", set()),
    ("3", "tiny_lr", {"tiny-updates"}),
    ("3", "unfreeze_late", {"optimizer-param-mismatch"}),
    ("2", "unfreeze_late", {"optimizer-param-mismatch"}),
])
def test_hf_trainer_with_deepspeed_finds_what_it_finds_without(stage: str, bug: str, expected: set[str],
                                                              tmp_path: Path) -> None:
    """Trainer(args=TrainingArguments(deepspeed=...)): the same ids as tests/integrations/
    test_hf_callback.py's plain runs. Trainer's two parameter groups (decay, no decay) are
    stepped by ZeRO one at a time, two optimizer.step() calls per engine.step(): one step."""
    report = tmp_path / "r.json"
    ran = subprocess.run([sys.executable, "-m", "traindoc", "run", "--json", str(report), str(HF_SCRIPT),
                          "--deepspeed", stage, *(["--bug", bug] if bug else [])], capture_output=True, text=True,
                         env={**ENV, "TEST_PORT": free_port(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
                         cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["disabled"] == [], data["disabled"]
    assert set(serious(data)) == expected
    assert data["run"]["optimizer_steps"] == 40  # not 80
