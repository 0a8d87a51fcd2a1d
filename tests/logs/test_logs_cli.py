"""``traindoc logs`` end to end: what a user sees, the JSON run block, the options, bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from traindoc.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["logs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    code, out, err = run(capsys, *argv, "--json", "-")
    assert code == 0, err
    return json.loads(out), err


def ids(rep: dict) -> dict[str, int | None]:  # type: ignore[type-arg]
    return {f["id"]: f["step"] for f in rep["findings"]}


# ---------------------------------------------------------------------------- the seeds
def test_seed000_red_flags_get_findings_with_their_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 000: "loss > 1000, MAE > 50, Gini < -0.3" must be reported with those numbers."""
    rep, err = report(capsys, str(FIX / "seeds" / "seed000_red_flags.csv"))
    found = {f["id"]: f for f in rep["findings"]}
    assert {"divergence", "metric-divergence", "metric-out-of-range"} <= set(found)
    assert found["divergence"]["evidence"]["peak"] > 1000
    assert found["metric-divergence"]["evidence"]["peak"]["metric.train_mae"] > 50
    assert found["metric-out-of-range"]["evidence"]["most_extreme"]["expert_gini"] < -0.3
    assert "unmapped columns: Level, Train_H (use --map signal=column)" in err
    assert rep["run"]["x"] == "epoch" and rep["run"]["logs"]["x_column"] == "Epoch"


def test_seed000_healthy_is_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    rep, _ = report(capsys, str(FIX / "seeds" / "seed000_healthy.csv"))
    assert rep["findings"] == []
    assert {"expert-collapse", "metric-out-of-range", "metric-divergence", "degenerate-threshold"} <= set(rep["ran"])


def test_seed001_exploding_norms_and_f1_zero(capsys: pytest.CaptureFixture[str]) -> None:
    rep, _ = report(capsys, str(FIX / "seeds" / "seed001_grad_f1.csv"))
    assert ids(rep)["degenerate-threshold"] == 13  # epoch 14 of the 1-based log
    assert "exploding-gradients" in ids(rep)


def test_seed004_onecycle_and_broken_validation(capsys: pytest.CaptureFixture[str]) -> None:
    rep, _ = report(capsys, str(FIX / "seeds" / "seed004_onecycle_ema.csv"), "--num-classes", "1000")
    found = {f["id"]: f for f in rep["findings"]}
    assert found["scheduler-before-optimizer"]["step"] == 0
    ev = found["scheduler-before-optimizer"]["evidence"]
    assert ev["first_lr"] == pytest.approx(0.0612, abs=1e-4) and ev["intended_first_lr"] == pytest.approx(0.032, rel=1e-3)
    assert found["val-at-chance"]["evidence"]["classes_inferred"] is False
    fixed, _ = report(capsys, str(FIX / "seeds" / "seed004_fixed.csv"), "--num-classes", "1000")
    assert fixed["findings"] == []


def test_hf_nan_hidden_by_logging_filter(capsys: pytest.CaptureFixture[str]) -> None:
    rep, _ = report(capsys, str(FIX / "hf" / "nan_hidden"))
    assert ids(rep)["nan-hidden-by-logging"] == 24 and ids(rep)["nonfinite"] == 24
    healthy, _ = report(capsys, str(FIX / "hf" / "healthy"))
    assert healthy["findings"] == []


@pytest.mark.parametrize("path", ["tensorboard/healthy", "lightning/version_0/metrics.csv", "jsonl/metrics.jsonl"])
def test_healthy_real_format_logs_are_quiet(capsys: pytest.CaptureFixture[str], path: str) -> None:
    rep, _ = report(capsys, str(FIX / path))
    assert rep["findings"] == [], [f["message"] for f in rep["findings"]]
    assert rep["run"]["x"] == "step" and rep["run"]["source"] == "logs"


def test_tensorboard_diverging_run(capsys: pytest.CaptureFixture[str]) -> None:
    rep, _ = report(capsys, str(FIX / "tensorboard" / "diverging"))
    assert {"divergence", "exploding-gradients"} <= set(ids(rep))


# ---------------------------------------------------------------------------- the options
def test_map_override_and_json_mapping(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "log.csv"
    p.write_text("it,objective,alpha\n" + "".join(f"{i},{2 * math.exp(-i / 20)},{1e-3}\n" for i in range(60)))
    code, _, err = run(capsys, str(p))
    assert code == 2 and err.startswith("Error:") and "--map loss=" in err  # nothing mapped: an error
    rep, err = report(capsys, str(p), "--map", "loss=objective", "--map", "lr=alpha")
    assert rep["run"]["logs"]["mapping"] == {"loss": "objective", "lr": "alpha"}
    assert rep["run"]["logs"]["x_column"] == "it"
    assert "unmapped" not in err


def test_max_norm_lets_clipping_every_step_judge_the_log(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "log.csv"
    p.write_text("step,loss,grad_norm\n" + "".join(f"{i},{1 + 1 / (i + 1)},{40 + i % 5}\n" for i in range(100)))
    rep, _ = report(capsys, str(p), "--max-norm", "1.0")
    assert "clipping-every-step" in ids(rep)
    rep, _ = report(capsys, str(p))
    assert "clipping-every-step" not in ids(rep)


def test_fail_on_and_select(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, str(FIX / "seeds" / "seed004_onecycle_ema.csv"), "--fail-on", "warning")
    assert code == 3
    rep, _ = report(capsys, str(FIX / "seeds" / "seed004_onecycle_ema.csv"), "--select", "val-at-chance")
    assert set(ids(rep)) == {"val-at-chance"}


def test_recorded_stream(capsys: pytest.CaptureFixture[str]) -> None:
    rep, err = report(capsys, str(FIX / "jsonl" / "recorded_run.jsonl"))
    assert rep["run"]["source"] == "live" and "traindoc stream" in err


# -------------------------------------------------------------------------------- bad input
BAD: list[tuple[str, bytes | str | None, str]] = [
    ("missing.csv", None, "no such file or folder"),
    ("empty.csv", "", "is empty"),
    ("blank.csv", "\n\n  \n", "is empty"),
    ("header_only.csv", "step,loss\n", "no rows of values"),
    ("no_header.csv", "just some words\nmore words\n", "not a CSV header"),
    ("long_row.csv", "step,loss\n0,1\n1,2,3,4\n", "longer than the header"),
    ("text_only.csv", "step,loss\n0,abc\n1,def\n", "no column could be mapped"),
    ("unknown.csv", "step,foo,bar\n0,1,2\n", "no column could be mapped"),
    ("bad.json", "{not json", "not valid JSON"),
    ("other.json", '{"a": 1}', "without log_history"),
    ("state.json", '{"log_history": [{"loss": 1.0}]}', "has no step"),
    ("lines.jsonl", '{"step": 0, "loss": 1}\nnot json\n{"step": 2, "loss": 1}\n', "lines.jsonl:2: not JSON"),
    ("array.jsonl", "[1, 2]\n", "not an object"),
    ("binary.bin", bytes(range(256)) * 4, "binary file"),
    ("events.out.tfevents.x", b"\x00" * 40, "not a TensorBoard event file"),
    ("stream.jsonl", '{"kind": "scalar", "step": 0}\n', "not a traindoc event"),
]


@pytest.mark.parametrize("name,content,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_error_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str,
                                     content: bytes | str | None, message: str) -> None:
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif content is not None:
        p.write_text(content)
    code, out, err = run(capsys, str(p))
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], err
    assert "Traceback" not in err and out == ""


def test_corrupt_tensorboard_record_names_the_byte(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = next(p for p in (FIX / "tensorboard" / "diverging").iterdir() if "tfevents" in p.name)
    data = bytearray(src.read_bytes())
    data[len(data) // 2: len(data) // 2 + 16] = b"\xff" * 16
    p = tmp_path / "events.out.tfevents.corrupt"
    p.write_bytes(bytes(data))
    code, _, err = run(capsys, str(p))
    assert code == 2 and err.startswith("Error: ") and "corrupt event file near byte" in err


def test_truncated_files_are_read_up_to_the_cut(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = (FIX / "seeds" / "seed000_healthy.csv").read_text()
    p = tmp_path / "training_log.csv"
    p.write_text(src[: len(src) - 20])  # the last row cut mid-line
    code, _, err = run(capsys, str(p))
    assert code == 0 and "note: training_log.csv: the last line is cut short" in err


def test_bad_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = FIX / "seeds" / "seed000_healthy.csv"
    for argv, message in (
        (["--map", "loss=Train_Los"], "did you mean 'Train_Loss'"),
        (["--map", "los=Train_Loss"], "Did you mean loss"),
        (["--num-classes", "1"], "--num-classes must be >= 2"),
        (["--max-norm", "0"], "--max-norm must be > 0"),
        (["--max-norm", "1"], "needs a gradient norm column"),
        (["--json", str(tmp_path / "nope" / "r.json")], "does not exist"),
        (["--ignore", "val-at-chanse"], "Did you mean val-at-chance"),
    ):
        code, _, err = run(capsys, str(p), *argv)
        assert code == 2 and err.startswith("Error: ") and message in err, (argv, err)


def test_logs_work_without_torch() -> None:
    """The logs face imports no torch, and runs where torch cannot be imported at all."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import traindoc.sources.logs.cli\n"
        "from traindoc.cli import main\n"
        f"rc = main(['logs', {str(FIX / 'seeds' / 'seed004_onecycle_ema.csv')!r}, '--json', '-'])\n"
        "assert rc == 0, rc\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "scheduler-before-optimizer" in p.stdout
