"""The four output formats: text, JSON (the run report's finding fields), SARIF 2.1.0
(validated against the official schema) and GitHub annotations.

``sarif-schema-2.1.0.json`` next to this file is the OASIS schema as published in
oasis-tcs/sarif-spec, ``Schemata/sarif-schema-2.1.0.json`` (2.1.0 errata01, 112,768 bytes,
sha256 ddddcccb...5fce7949), vendored so the test runs offline."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest

from traindoc.lint import config
from traindoc.lint.__main__ import main
from traindoc.lint.rules import RULES

HERE = Path(__file__).parent
SCHEMA = json.loads((HERE / "sarif-schema-2.1.0.json").read_text())

TWO_FINDINGS = textwrap.dedent(
    """
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        loss = criterion(model(x), y)
        loss = loss.clamp(max=100.0)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    """
).lstrip()
WARNING = textwrap.dedent(
    """
    import torch

    opt = torch.optim.Muon(params, lr=3e-4)
    """
).lstrip()


@pytest.fixture()
def project(tmp_path, monkeypatch):
    config.clear_cache()
    (tmp_path / ".git").mkdir()  # the repository root SARIF paths are relative to
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TWO_FINDINGS)
    (tmp_path / "src" / "muon run.py").write_text(WARNING)
    (tmp_path / "src" / "broken.py").write_text("def (\n")
    monkeypatch.chdir(tmp_path / "src")
    return tmp_path


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_text(project, capsys):
    code, out, err = run(capsys, ".")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("muon run.py:3:")
    assert any(line.startswith("train.py:6:5: constant-loss `loss.clamp(max=100.0)`") for line in lines)
    assert any(line.startswith("train.py:8:5: clip-before-unscale ") for line in lines)
    fixes = [line for line in lines if line.startswith("    fix: ")]
    assert len(fixes) == 3
    assert lines[-1] == "3 findings in 2 files (2 error, 1 warning)"
    assert "Error: broken.py:1: cannot parse" in err


def test_json_has_the_run_report_fields(project, capsys):
    code, out, _ = run(capsys, ".", "--format", "json")
    data = json.loads(out)
    assert code == 1 and len(data) == 3
    for item in data:
        assert {"id", "severity", "title", "message", "cause", "fix", "path", "line", "col"} <= set(item)
    assert {(d["path"], d["line"], d["id"]) for d in data} == {
        ("muon run.py", 3, "muon-adamw-scale-lr"),
        ("train.py", 6, "constant-loss"),
        ("train.py", 8, "clip-before-unscale"),
    }


def test_sarif_validates_against_the_2_1_0_schema(project, capsys):
    code, out, _ = run(capsys, ".", "--format", "sarif")
    log = json.loads(out)
    jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(log)
    assert code == 1 and log["version"] == "2.1.0"
    run_ = log["runs"][0]
    rules = run_["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [cls.id for cls in RULES]  # stable ids: the catalog ids
    assert all(r["shortDescription"]["text"] for r in rules)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run_["results"]}
    assert uris == {"src/train.py", "src/muon%20run.py"}  # relative to the repository root
    for r in run_["results"]:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        region = r["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] >= 1 and region["startColumn"] >= 1
    notes = run_["invocations"][0]["toolExecutionNotifications"]
    assert len(notes) == 1 and "cannot parse" in notes[0]["message"]["text"]


def test_sarif_without_findings_validates(tmp_path, capsys, monkeypatch):
    config.clear_cache()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.py").write_text("x = 1\n")
    code, out, _ = run(capsys, "ok.py", "--format", "sarif", "--select", "constant-loss")
    log = json.loads(out)
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    assert code == 0 and log["runs"][0]["results"] == []
    assert [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]] == ["constant-loss"]


def test_github_annotations(project, capsys):
    code, out, _ = run(capsys, ".", "--format", "github")
    lines = out.splitlines()
    assert code == 1
    errors = [line for line in lines if line.startswith("::error file=src/train.py,line=")]
    warnings = [line for line in lines if line.startswith("::warning file=src/muon run.py,line=3,col=")]
    assert len(errors) == 2 and len(warnings) == 1
    assert "title=traindoc constant-loss%3A " in errors[0] or "title=traindoc constant-loss%3A " in errors[1]
    assert all("%0AFix%3A" not in line and "%0AFix: " in line for line in errors + warnings)
    assert any(line.startswith("::error file=src/broken.py,line=1,title=traindoc::") for line in lines)


def test_output_file(project, capsys):
    code, out, err = run(capsys, ".", "--format", "sarif", "-o", str(project / "out.sarif"))
    assert code == 1 and out == ""
    assert json.loads((project / "out.sarif").read_text())["version"] == "2.1.0"
    assert "3 findings in 2 files" in err


def test_docs_example_is_what_lint_prints(tmp_path, capsys, monkeypatch):
    """docs/lint.md shows the output for tests/lint/demo_train.py; keep them in step."""
    config.clear_cache()
    docs = (HERE.parents[1] / "docs" / "lint.md").read_text()
    shown = docs.split("$ traindoc lint train.py src/\n", 1)[1].split("```", 1)[0]
    (tmp_path / "train.py").write_text((HERE / "demo_train.py").read_text())
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "train.py")
    assert code == 1
    assert out == shown
