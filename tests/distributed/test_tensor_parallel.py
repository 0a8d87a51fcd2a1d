"""torch's own tensor parallelism and FSDP2 under `traindoc run` (two gloo ranks; Megatron-style
column/row layers, sequence parallelism with DTensor activations, a language model with its loss
under `loss_parallel()`, the same model under `fully_shard` and under FSDP1 with
`use_orig_params=True`, where a rank's view of a parameter it holds no element of is empty):
watching changes no weight and runs
no DTensor operation (a DTensor op may redistribute, a collective the job did not ask for), a
healthy job stays quiet, and the two mistakes of PyTorch's own tensor-parallel example are found.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ENV, ROOT, run, torch_exit_abort

JOB = Path(__file__).resolve().parent / "scripts" / "tp_job.py"
STYLES = ["megatron", "sequence", "titan", "fsdp2", "fsdp1"]


def torchrun(*args: str, traindoc: bool = True) -> subprocess.CompletedProcess[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    target = ["-m", "traindoc", "run", *args] if traindoc else list(args)
    return run([*launcher, *target], timeout=240, env=ENV, cwd=ROOT)


def _findings(report: Path) -> list[tuple[str, int | None]]:
    return sorted((f["id"], f["step"]) for f in json.loads(report.read_text())["findings"]
                  if f["severity"] in ("warning", "error"))


@pytest.mark.parametrize("style", STYLES)
def test_watching_changes_no_weight_runs_no_dtensor_op_and_stays_quiet(style: str, tmp_path: Path) -> None:
    bare, watched, report = tmp_path / "bare", tmp_path / "watched", tmp_path / "r.json"
    bare.mkdir(), watched.mkdir()
    out = torchrun(str(JOB), "--style", style, "--save-dir", str(bare), traindoc=False)
    assert out.returncode == 0 or torch_exit_abort(out), out.stderr[-3000:]
    out = torchrun("--json", str(report), str(JOB), "--style", style, "--save-dir", str(watched),
                   "--audit", str(tmp_path / "audit"))
    assert out.returncode == 0 or torch_exit_abort(out), out.stderr[-3000:]
    for rank in (0, 1):
        a, b = torch.load(bare / f"rank{rank}.pt"), torch.load(watched / f"rank{rank}.pt")
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)), (rank, k)
        ops = (tmp_path / f"audit.rank{rank}").read_text()
        assert ops == "", f"rank {rank}: DTensor operations run by traindoc: {sorted(set(ops.split()))}"
    assert "implicitly creating a replicated DTensor" not in out.stderr
    assert _findings(report) == []


@pytest.mark.parametrize("style", ["megatron", "titan"])
def test_gradients_never_cleared_are_found_on_dtensor_parameters(style: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    out = torchrun("--json", str(report), str(JOB), "--style", style, "--no-zero-grad")
    assert out.returncode == 0 or torch_exit_abort(out), out.stderr[-3000:]
    assert [i for i, _ in _findings(report)] == ["missing-zero-grad"]


@pytest.mark.parametrize("style", ["sequence", "titan", "fsdp2", "fsdp1 --flat-params"])
def test_optimizer_built_before_the_parameters_are_sharded_is_a_mismatch_not_a_constant_loss(style: str, tmp_path: Path) -> None:
    """The DTensors (FSDP1: the flat parameter) get the gradients, the optimizer's old tensors
    none: optimizer-param-mismatch alone (the loss does reach parameters, so constant-loss has
    nothing to say)."""
    report = tmp_path / "r.json"
    out = torchrun("--json", str(report), str(JOB), "--style", *style.split(), "--optimizer-first")
    assert out.returncode == 0 or torch_exit_abort(out), out.stderr[-3000:]
    assert _findings(report) == [("optimizer-param-mismatch", 0)]
