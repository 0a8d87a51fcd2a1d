"""Parsing, suppression, configuration, errors and exit codes of the lint engine and CLI."""

from __future__ import annotations

import textwrap

import pytest

from traindoc.lint import config, lint_paths, lint_source
from traindoc.lint.__main__ import main
from traindoc.lint.rules import RULES

BAD = textwrap.dedent(
    """
    import torch

    for x, y in loader:
        loss = criterion(model(x), y)
        if torch.isnan(loss):
            loss = torch.tensor(0.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """
).lstrip()
BAD_LINE = 6


@pytest.fixture(autouse=True)
def _fresh_config_cache():
    config.clear_cache()
    yield
    config.clear_cache()


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_finding_carries_location_and_catalog_fields():
    findings, errors = lint_source(BAD, "train.py")
    assert not errors
    assert [(f.finding.id, f.line, f.col) for f in findings] == [("masked-nonfinite", BAD_LINE, 9)]
    d = findings[0].to_dict()
    assert {"id", "severity", "title", "message", "cause", "fix", "path", "line", "col"} <= set(d)
    assert d["path"] == "train.py" and d["severity"] == "error"


def test_parse_error_is_one_line_and_other_files_still_linted(tmp_path, capsys):
    write(tmp_path / "broken.py", "def f(:\n    pass\n")
    write(tmp_path / "train.py", BAD)
    code = main([str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("Error: ") and "broken.py:1: cannot parse" in err
    assert "masked-nonfinite" in out


def test_parse_errors_alone_exit_2(tmp_path, capsys):
    write(tmp_path / "broken.py", "x = (\n")
    assert main([str(tmp_path / "broken.py")]) == 2
    assert "cannot parse" in capsys.readouterr().err


def test_nonexistent_path_is_a_usage_error(tmp_path, capsys):
    code = main([str(tmp_path / "nope.py")])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("Error: path") and "does not exist" in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_unknown_id_gets_did_you_mean(tmp_path, capsys):
    write(tmp_path / "t.py", BAD)
    assert main([str(tmp_path), "--select", "masked-nonfinit"]) == 2
    assert "Did you mean masked-nonfinite" in capsys.readouterr().err


def test_select_of_id_without_lint_rule_is_explained(tmp_path, capsys):
    write(tmp_path / "t.py", BAD)
    assert main([str(tmp_path), "--select", "loss-spike"]) == 2
    assert "has no lint rule" in capsys.readouterr().err


def test_clean_file_exits_0(tmp_path, capsys):
    write(tmp_path / "ok.py", "import torch\nx = torch.zeros(3)\n")
    assert main([str(tmp_path)]) == 0
    assert "No findings (1 file checked)." in capsys.readouterr().out


def test_exit_zero(tmp_path, capsys):
    write(tmp_path / "t.py", BAD)
    assert main([str(tmp_path), "--exit-zero"]) == 0


def test_crashing_rule_is_an_internal_error_not_a_crash(monkeypatch):
    cls = RULES[0]

    def boom(self, mod):
        raise RuntimeError("boom")
        yield  # pragma: no cover

    monkeypatch.setattr(cls, "check", boom)
    findings, errors = lint_source(BAD, "train.py")
    assert [e.kind for e in errors] == ["internal"]
    assert cls.id in errors[0].message and "boom" in errors[0].message
    other = [f for f in findings if f.finding.id != cls.id]
    assert findings == other  # the other rules still ran


@pytest.mark.parametrize(
    "comment, quiet",
    [
        ("  # traindoc: ignore[masked-nonfinite]", True),
        ("  # traindoc: ignore", True),
        ("  # traindoc: ignore[constant-loss, masked-nonfinite]", True),
        ("  # traindoc: ignore[constant-loss]", False),
        ("  # noqa", False),
    ],
)
def test_suppression_comment(comment, quiet):
    lines = BAD.splitlines()
    lines[BAD_LINE - 1] += comment
    findings, _ = lint_source("\n".join(lines) + "\n", "t.py")
    assert (not findings) == quiet


def test_select_and_ignore(tmp_path):
    write(tmp_path / "t.py", BAD)
    assert lint_paths([tmp_path], ignore=["masked-nonfinite"]).findings == []
    assert lint_paths([tmp_path], select=["constant-loss"]).findings == []
    assert len(lint_paths([tmp_path], select=["masked-nonfinite"]).findings) == 1


def test_pyproject_ignore_and_per_file_ignores(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.traindoc]\nper-file-ignores = { "tests/*" = ["masked-nonfinite"] }\n')
    write(tmp_path / "tests" / "test_train.py", BAD)
    write(tmp_path / "src" / "train.py", BAD)
    result = lint_paths([tmp_path])
    assert [f.path.rsplit("/", 2)[-2] for f in result.findings] == ["src"]


def test_pyproject_select_and_lint_table(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.traindoc]\nselect = ["loss-spike"]\n[tool.traindoc.lint]\nignore = ["masked-nonfinite"]\n')
    write(tmp_path / "t.py", BAD)
    # select from [tool.traindoc] names a detector only: no lint rule runs
    assert lint_paths([tmp_path]).findings == []
    # --select replaces the config's select; the lint table's ignore still applies
    assert lint_paths([tmp_path], select=["masked-nonfinite", "constant-loss"]).findings == []
    assert lint_paths([tmp_path], use_config=False).findings != []


def test_pyproject_unknown_id_is_an_error(tmp_path, capsys):
    write(tmp_path / "pyproject.toml", '[tool.traindoc]\nignore = ["masked-nonfinit"]\n')
    write(tmp_path / "t.py", BAD)
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "pyproject.toml" in err and "Did you mean" in err


def test_lint_and_the_other_faces_read_the_same_pyproject(tmp_path):
    """One loader: a sub-package's pyproject.toml without [tool.traindoc] is passed over by
    lint and by traindoc.config alike, so both read the repository's table."""
    from traindoc import config as shared

    write(tmp_path / "pyproject.toml", '[tool.traindoc]\nignore = ["masked-nonfinite"]\n')
    write(tmp_path / "pkg" / "pyproject.toml", '[project]\nname = "pkg"\n')
    train = write(tmp_path / "pkg" / "train.py", BAD)
    assert shared.load(train.parent).path == str((tmp_path / "pyproject.toml").resolve())
    assert config.for_path(train).root == tmp_path.resolve()
    assert lint_paths([train]).findings == []


def test_pyproject_that_does_not_parse_is_one_error_line(tmp_path, capsys):
    write(tmp_path / "pyproject.toml", "[tool.traindoc\nignore = 1\n")
    write(tmp_path / "t.py", BAD)
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: cannot read ") and err.count("\n") == 1


def test_directories_skip_virtualenvs_and_hidden(tmp_path):
    write(tmp_path / ".venv" / "lib" / "bad.py", BAD)
    write(tmp_path / "build" / "bad.py", BAD)
    write(tmp_path / "pkg" / "bad.py", BAD)
    write(tmp_path / "notes.txt", "not python")
    result = lint_paths([tmp_path])
    assert result.files == 1 and len(result.findings) == 1


def test_explicit_file_without_py_suffix_is_linted(tmp_path):
    write(tmp_path / "train", BAD)
    assert len(lint_paths([tmp_path / "train"]).findings) == 1


def test_source_encoding_cookie_and_bad_bytes(tmp_path, capsys):
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9'\n")
    (tmp_path / "bad.py").write_bytes(b"x = '\xff\xfe'\n")
    code = main([str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "bad.py" in err and "latin.py" not in err
