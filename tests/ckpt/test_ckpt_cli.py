"""`traindoc ckpt inspect` / `ckpt diff` as a user meets them: tables, report, JSON, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckpt_fixtures import Made, made  # noqa: F401
from conftest import python
from traindoc.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["ckpt", *argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_inspect_prints_the_summary_then_the_report(made: Made, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "inspect", str(made.ema_bad[1]))
    assert code == 0 and out == ""
    for text in ("torch-dict, training checkpoint, step 8", "parts: model, optimizer, scheduler, step, ema",
                 "absent: scaler, rng", "tensors by dtype", "float32", "largest tensors",
                 "conv.weight", "optimizer state (a resume restores these)", "Adam-family",
                 "scheduler: last_lr", "BatchNorm (ema): 1 modules, 1 with initial running statistics"):
        assert text in err, text
    assert err.index("tensors by dtype") < err.index("traindoc report") < err.index("stale-bn-eval")


def test_inspect_bare_weights_says_resume_checks_do_not_apply(made: Made, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "inspect", "--verbose", str(made.safetensors))  # --verbose lists them
    assert code == 0
    assert "weights only" in err and "resume checks do not apply" in err and "bfloat16" in err
    assert "checkpoint-incomplete: this run showed no train_state" in err


def test_inspect_json_block(made: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "inspect", "--json", "-", str(made.complete))
    assert code == 0
    data = json.loads(out)
    ck = data["run"]["checkpoint"]
    assert data["run"]["source"] == "ckpt" and data["run"]["steps"] == 12
    assert ck["has"] == ["model", "optimizer", "scheduler", "scaler", "step", "rng"] and ck["missing"] == []
    assert ck["dtypes"]["float32"]["tensors"] == 12 and ck["lrs"][0]["lr"] == pytest.approx(1e-3)
    assert ck["largest"][0]["name"] == "conv.weight"
    assert data["findings"] == []


def test_diff_tables_name_the_frozen_norms(made: Made, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = made.bf16
    code, _, err = _run(capsys, "diff", str(old), str(new), "--top", "3")
    assert code == 0
    assert "checkpoint diff (20 optimizer steps apart)" in err
    assert "changed most" in err and "changed least" in err
    assert "bit-identical: 2 of 10 parameters did not change at all: bn.weight, norm.weight" in err
    assert "frozen-parameters" in err and "bf16-master-weights" in err


def test_diff_json_and_fail_on(made: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = made.bf16
    code, _, _ = _run(capsys, "diff", str(old), str(new), "--json", str(tmp_path / "r.json"),
                      "--fail-on", "warning")
    assert code == 3
    ck = json.loads((tmp_path / "r.json").read_text())["run"]["checkpoint"]
    assert ck["steps"] == 20 and set(ck["unchanged"]) == {"bn.weight", "norm.weight"}
    assert ck["most_changed"][0]["update_per_step"] == pytest.approx(ck["most_changed"][0]["update"] / 20)
    code, _, _ = _run(capsys, "diff", str(old), str(new), "--select", "stale-bn-eval", "--fail-on", "warning")
    assert code == 0


def test_expect_lr_flag(made: Made, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "inspect", str(made.hf), "--expect-lr", "3e-4", "--fail-on", "warning")
    assert code == 3 and "lr-overridden-by-checkpoint" in err
    code, _, err = _run(capsys, "inspect", str(made.hf), "--expect-lr", "1e-3", "--fail-on", "warning")
    assert code == 0, err
    with pytest.raises(SystemExit) as exc:
        main(["ckpt", "inspect", str(made.hf), "--expect-lr", "-1"])
    assert exc.value.code == 2 and "must be a positive number" in capsys.readouterr().err


def test_cli_module_does_not_import_torch() -> None:
    out = python("-c", "import sys, traindoc.cli; traindoc.cli.build_parser(); "
                       "print(sorted(m for m in ('torch', 'safetensors', 'numpy') if m in sys.modules))")
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
