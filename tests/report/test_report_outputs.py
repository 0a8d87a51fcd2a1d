"""Output paths are checked before any work: a folder, a missing parent or an unwritable place
for --json/--html/--record (and lint's --output) is one `Error:` line and exit 2, for every
face, before the script runs. Reports are written atomically, and still written when the
script raises."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from report_cases import ROOT, traindoc

from traindoc.cli import main
from traindoc.report import html

GOLDEN = str(ROOT / "tests" / "golden" / "loss_spike.jsonl")
LOG = str(ROOT / "tests" / "fixtures" / "logs" / "seeds" / "seed000_healthy.csv")
SCRIPT = """
import pathlib, torch
pathlib.Path("ran.txt").write_text("the script ran")
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
{ending}
"""


def faces(tmp: Path, option: str, path: str) -> list[list[str]]:
    """Every face that takes ``option``, given ``path`` for it."""
    script = tmp / "train.py"
    script.write_text(SCRIPT.format(ending=""))
    report = tmp / "saved.json"
    report.write_text("{}")
    cmds = [["run", option, path, str(script)]]
    if option == "--record":
        return cmds
    cmds += [["analyze", option, path, GOLDEN], ["logs", option, path, LOG],
             ["ckpt", "inspect", option, path, str(tmp / "missing.pt")],
             ["ckpt", "diff", option, path, str(tmp / "a.pt"), str(tmp / "b.pt")],
             ["report", option, path, str(report)]]
    return cmds


@pytest.mark.parametrize("option", ["--json", "--html", "--record"])
@pytest.mark.parametrize("problem", ["folder", "missing parent", "parent is a file", "unwritable"])
def test_a_bad_output_path_is_refused_up_front(option: str, problem: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a_file").write_text("")
    (tmp_path / "locked").mkdir()
    path = {"folder": str(tmp_path), "missing parent": str(tmp_path / "nope" / "r.out"),
            "parent is a file": str(tmp_path / "a_file" / "r.out"),
            "unwritable": str(tmp_path / "locked" / "r.out")}[problem]
    locked = str((tmp_path / "locked").resolve())
    real_access = os.access
    # root may write anywhere: pretend the folder is read-only, as it is to a normal user
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == locked else real_access(p, mode))
    monkeypatch.chdir(tmp_path)
    for argv in faces(tmp_path, option, path):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"Error: {option} ") and err.count("\n") == 1, (argv, err)
        assert not (tmp_path / "ran.txt").exists()  # refused before the script ran


def test_lint_output_is_checked_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.py").write_text("x = 1\n")
    assert main(["lint", "-o", str(tmp_path), str(tmp_path / "t.py")]) == 2
    assert capsys.readouterr().err.startswith("Error: --output ")


def test_record_cannot_go_to_stdout(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("")
    assert main(["run", "--record", "-", str(tmp_path / "t.py")]) == 2
    assert "Error: --record -" in capsys.readouterr().err


def test_a_script_that_raises_still_gets_its_reports_and_its_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(ending="raise RuntimeError('boom')"))
    ran = traindoc("run", "--json", "r.json", "--html", "r.html", "--fail-on", "info", "train.py", cwd=tmp_path)
    assert ran.returncode == 1, ran.stderr  # the script's own code, not --fail-on's 3
    assert "RuntimeError: boom" in ran.stderr
    assert (tmp_path / "r.json").is_file() and (tmp_path / "r.html").read_text().endswith("</html>\n")
    assert not [p.name for p in tmp_path.iterdir() if "traindoc-tmp" in p.name]


def test_a_failed_write_leaves_no_partial_file_and_loses_no_other(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "r.html"
    page.write_text("the previous report")

    def broken(report: object) -> str:
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(html, "render", broken)
    code = main(["analyze", "--html", str(page), "--json", str(tmp_path / "r.json"), "--fail-on", "warning", GOLDEN])
    assert code == 3  # the exit code is the findings', not the failed write's
    assert page.read_text() == "the previous report" and (tmp_path / "r.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.json"]
    assert "could not write the HTML report" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["report", "--help"]])
def test_help_ends_with_the_exit_codes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    out = capsys.readouterr().out
    assert "exit codes:" in out and "3  the script succeeded and a finding is at or above --fail-on" in out
