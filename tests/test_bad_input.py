"""Bad input is one ``Error:`` line and exit 2 in every face: never a traceback, never a hang.

Each case is what a user can really pass: a named pipe, JSON nested 100,000 deep, a CSV whose
header has an unbalanced quote, source code nested deeper than Python's parser goes, a saved
report with fields of the wrong type, a ``[tool.traindoc]`` table with a typo. The faces run
in-process through ``traindoc.cli.main`` (a FIFO in a fresh interpreter, so that a read that
blocks fails the test on its timeout instead of hanging the suite).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import traindoc
from traindoc.cli import main
from traindoc.lint import config as lint_config

CSV = "step,loss\n0,2.0\n1,1.9\n2,1.8\n3,1.7\n"
PY = "import torch\nmodel = torch.nn.Linear(2, 2)\n"
DEEP = "[" * 100_000 + "]" * 100_000


def one_error(code: int, err: str) -> str:
    """The one ``Error:`` line of a refused input (asserting exit 2 and no traceback)."""
    assert "Traceback" not in err, err
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, err
    return errors[0]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


# ------------------------------------------------------------------ a FIFO (named pipe)
@pytest.mark.parametrize("face", ["logs", "lint", "analyze", "report"])
def test_a_fifo_is_refused_without_reading_it(tmp_path: Path, face: str) -> None:
    fifo = tmp_path / ("pipe.py" if face == "lint" else "pipe.jsonl")
    os.mkfifo(fifo)
    try:
        out = traindoc(face, str(fifo), cwd=tmp_path, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"traindoc {face} blocked reading a FIFO")
    line = one_error(out.returncode, out.stderr)
    assert "pipe." in line and "not a regular file" in line and "FIFO" in line


# ------------------------------------------------------------------ JSON nested 100,000 deep
def _deep_report(tmp: Path) -> list[str]:
    (tmp / "deep.json").write_text(DEEP)
    return ["report", str(tmp / "deep.json")]


def _deep_stream(tmp: Path) -> list[str]:
    (tmp / "deep.jsonl").write_text(DEEP + "\n")
    return ["analyze", str(tmp / "deep.jsonl")]


def _deep_trainer_state(tmp: Path) -> list[str]:
    (tmp / "trainer_state.json").write_text('{"log_history": ' + DEEP + "}")
    return ["logs", str(tmp / "trainer_state.json")]


def _deep_jsonl_line(tmp: Path) -> list[str]:
    (tmp / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0}\n{"step": 1, "x": ' + DEEP + "}\n")
    return ["logs", str(tmp / "metrics.jsonl")]


@pytest.mark.parametrize("make", [_deep_report, _deep_stream, _deep_trainer_state, _deep_jsonl_line],
                         ids=["report", "analyze", "logs-trainer_state", "logs-jsonl"])
def test_json_nested_100000_deep_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             make: Callable[[Path], list[str]]) -> None:
    argv = make(tmp_path)
    line = one_error(*cli(capsys, *argv))
    assert Path(argv[-1]).name in line and "nested too deeply" in line


# ------------------------------------------------------------------ a recorded stream of wrong types
@pytest.mark.parametrize("line, says", [
    ('{"kind": "param_stats", "step": 1, "name": "w", "dtype": "torch.float32", "numel": "ten", '
     '"requires_grad": true, "norm": 1.0}', "numel is 'ten', not int"),
    ('{"kind": "scalar", "step": 1, "name": "loss", "value": "0.5"}', "value is '0.5', not float"),
    ('{"kind": "init_overwritten", "step": 0, "name": "w", "sites": ["a.py:1", 2], "stds": [], "counts": []}',
     "sites is"),
    ('{"kind": "optimizer", "step": 0, "index": 0, "cls": "SGD", "groups": [{"index": 0, "lr": "high", '
     '"names": [], "dtypes": [], "numel": 0}]}', "lr is 'high', not float"),
])
def test_a_recorded_event_of_the_wrong_type_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         line: str, says: str) -> None:
    """A stream is untrusted: a string where a count belongs would reach the detectors'
    arithmetic (and crash one, or make a wrong finding), so reading it stops at that line."""
    path = tmp_path / "run.jsonl"
    path.write_text('{"kind": "run_start", "source": "live"}\n' + line + "\n")
    error = one_error(*cli(capsys, "analyze", str(path)))
    assert "run.jsonl:2" in error and says in error, error


# ------------------------------------------------------------------ a CSV header with an open quote
def test_csv_header_with_an_unbalanced_quote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "train.csv"
    path.write_text('"step,loss\n0,2.0\n1,1.9\n')
    line = one_error(*cli(capsys, "logs", str(path)))
    assert "train.csv" in line and "unbalanced quote" in line


# ------------------------------------------------------------------ source nested too deep to parse
@pytest.mark.parametrize("source", ["x = " + "+".join(["1"] * 20_000), "x = " + ".".join(["a"] * 30_000)],
                         ids=["20000-term-sum", "30000-attribute-chain"])
def test_lint_of_code_nested_too_deep_for_the_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     source: str) -> None:
    path = tmp_path / "deep.py"
    path.write_text(source + "\n")
    line = one_error(*cli(capsys, "lint", "--no-config", str(path)))
    assert "deep.py" in line and "nests too deeply" in line


# ------------------------------------------------------------------ a saved report with wrong types
REPORT: dict[str, Any] = {
    "traindoc": "0", "schema_version": 2,
    "run": {"script": "train.py", "argv": [], "steps": 10, "ranks": 1, "source": "logs"},
    "findings": [{"id": "loss-spike", "severity": "warning", "title": "Loss spike", "step": 5,
                  "message": "loss 9.3 at step 5", "evidence": {"loss": 9.3}, "cause": "LR",
                  "fix": "lower it", "where": ["model.fc.weight"]}],
    "not_applicable": [], "ran": ["loss-spike"], "disabled": [], "series": {}, "params": {},
}


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(report: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node: Any = report
        for key in head:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(last) if last.isdigit() else last] = value
    return change


WRONG_TYPES = {
    "severity-int": (_set("findings.0.severity", 5), "findings[0].severity"),
    "severity-unknown": (_set("findings.0.severity", "critical"), "findings[0].severity"),
    "step-string": (_set("findings.0.step", "5"), "findings[0].step"),
    "where-string": (_set("findings.0.where", "model.fc.weight"), "findings[0].where"),
    "message-number": (_set("findings.0.message", 3), "findings[0].message"),
    "run-list": (_set("run", []), "run"),
    "run-steps-string": (_set("run.steps", "many"), "run.steps"),
    "ran-string": (_set("ran", "loss-spike"), "ran"),
    "params-list": (_set("params", []), "params"),
    "not-applicable-numbers": (_set("not_applicable", [{"id": 1, "reason": 2}]), "not_applicable[0].id"),
    "schema-bool": (_set("schema_version", True), "schema"),
    "evidence-900-deep": (_set("findings.0.evidence", {"a": json.loads("[" * 900 + "]" * 900)}), "nested"),
}


@pytest.mark.parametrize("case", list(WRONG_TYPES))
def test_report_with_a_field_of_the_wrong_type(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               case: str) -> None:
    change, field = WRONG_TYPES[case]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(REPORT))
    code, err = cli(capsys, "report", str(path))
    assert code == 0 and "loss-spike" in err, err  # the report before the change is a good one
    report = copy.deepcopy(REPORT)
    change(report)
    path.write_text(json.dumps(report))
    line = one_error(*cli(capsys, "report", str(path), "--html", str(tmp_path / "run.html")))
    assert "run.json" in line and field in line
    assert not (tmp_path / "run.html").exists()


# ------------------------------------------------------------------ [tool.traindoc] mistakes
# (case, table text, what the message must name besides the file, faces that read it)
PYPROJECT = {
    "unknown-key": ('fail_on = "error"', "'fail_on'", ("logs", "lint")),
    "wrong-type": ("fail-on = 3", "fail-on", ("logs", "lint")),
    "select-wrong-type": ("select = 3", "select", ("logs",)),
    "unknown-id": ('ignore = ["loss-spikes"]', "'loss-spikes'", ("logs",)),
    "unknown-id-per-file": ('per-file-ignores = { "*.py" = ["no-such-id"] }', "'no-such-id'", ("logs", "lint")),
    "unknown-severity": ('fail-on = "critical"', "fail-on", ("logs", "lint")),
    "lint-unknown-key": ("[tool.traindoc.lint]\nselec = []", "'selec'", ("logs", "lint")),
    "unknown-detector": ("[tool.traindoc.detectors.loss-spikes]\nfactor = 4.0", "'loss-spikes'", ("logs", "lint")),
    "unknown-threshold": ("[tool.traindoc.detectors.loss-spike]\nfactr = 4.0", "'factr'", ("logs", "lint")),
    "threshold-wrong-type": ('[tool.traindoc.detectors.loss-spike]\nfactor = "big"', "factor", ("logs", "lint")),
    "threshold-out-of-range": ("[tool.traindoc.detectors.loss-spike]\nfactor = 0.5", "factor", ("logs", "lint")),
    "invalid-toml": ("fail-on = error", "`fail-on = error`", ("logs", "lint")),
    "nested-too-deep": ("ignore = " + "[" * 100_000 + "]" * 100_000, "nested too deeply", ("logs", "lint")),
}


@pytest.mark.parametrize("face,case", [(face, case) for case, (_, _, faces) in PYPROJECT.items()
                                       for face in faces])
def test_pyproject_mistake_names_the_key_and_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch, face: str, case: str) -> None:
    text, named, _ = PYPROJECT[case]
    (tmp_path / "pyproject.toml").write_text(f"[tool.traindoc]\n{text}\n")
    line = one_error(*_in(tmp_path, capsys, monkeypatch, face))
    assert "pyproject.toml" in line and named in line


def test_pyproject_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_bytes(b"[tool.traindoc]\nignore = ['\xff']\n")
    for face in ("logs", "lint"):
        line = one_error(*_in(tmp_path, capsys, monkeypatch, face))
        assert "pyproject.toml" in line


def _in(tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, face: str) -> tuple[int, str]:
    """Run ``face`` on a small healthy input in ``tmp`` (where the pyproject.toml is)."""
    monkeypatch.chdir(tmp)
    lint_config.clear_cache()
    if face == "lint":
        (tmp / "train.py").write_text(PY)
        return cli(capsys, "lint", str(tmp / "train.py"))
    (tmp / "log.csv").write_text(CSV)
    return cli(capsys, "logs", str(tmp / "log.csv"))
