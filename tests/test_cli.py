"""The command line as a user meets it: `traindoc run`, `analyze`, `explain`, and bad input."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conftest import python, traindoc

SCRIPT = """
import sys, torch
print("argv", sys.argv, "name", __name__, "path0", sys.path[0].endswith("{folder}"))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
{ending}
"""


def write(tmp: Path, ending: str = "", name: str = "train.py") -> Path:
    path = tmp / name
    path.write_text(SCRIPT.format(folder=tmp.name, ending=textwrap.dedent(ending)))
    return path


def test_run_behaves_like_python(tmp: Path) -> None:
    script = write(tmp)
    out = traindoc("run", "--json", str(tmp / "r.json"), str(script), "--epochs", "3", "-x")
    assert out.returncode == 0, out.stderr
    assert f"argv ['{script}', '--epochs', '3', '-x'] name __main__ path0 True" in out.stdout
    assert "traindoc report" in out.stderr and "traindoc report" not in out.stdout
    report = json.loads((tmp / "r.json").read_text())
    assert set(report) >= {"traindoc", "run", "findings", "not_applicable"}
    assert report["run"]["steps"] == 5 and report["run"]["argv"] == ["--epochs", "3", "-x"]
    assert {"script", "argv", "python", "torch", "started", "duration_s", "steps", "ranks"} <= set(report["run"])
    assert all(set(na) == {"id", "reason"} for na in report["not_applicable"])


def test_exit_codes_and_user_tracebacks_pass_through(tmp: Path) -> None:
    assert traindoc("run", str(write(tmp, "sys.exit(7)"))).returncode == 7
    out = traindoc("run", str(write(tmp, "raise ValueError('user bug')", name="bad.py")))
    assert out.returncode == 1
    assert "ValueError: user bug" in out.stderr and f'File "{tmp / "bad.py"}"' in out.stderr
    assert "runpy" not in out.stderr and "traindoc/live" not in out.stderr
    assert "traindoc report" in out.stderr  # the report still comes, after the traceback


def test_module_form(tmp: Path) -> None:
    pkg = tmp / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    write(pkg, name="train.py")
    out = traindoc("run", "-m", "mypkg.train", "--lr", "1", cwd=tmp)
    assert out.returncode == 0, out.stderr
    assert "'--lr', '1'" in out.stdout and "name __main__" in out.stdout


def test_module_form_runs_a_package_and_stays_main_to_the_end(tmp: Path) -> None:
    """``-m pkg`` runs ``pkg/__main__.py`` as ``python -m pkg`` does, and the module is still
    ``__main__`` when the exit handlers run: pickle finds the classes it defined there."""
    pkg = tmp / "exitpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import atexit, pickle, sys\n"
        "class Checkpoint:\n    pass\n"
        "atexit.register(lambda: print('at exit', len(pickle.dumps(Checkpoint())) > 0,\n"
        "                              sys.argv[0].endswith('__main__.py'), __spec__.name))\n")
    bare = python("-m", "exitpkg", cwd=tmp)
    out = traindoc("run", "-m", "exitpkg", cwd=tmp)
    assert bare.stdout == "at exit True True exitpkg.__main__\n", bare.stderr
    assert out.returncode == 0 and out.stdout == bare.stdout, out.stderr


def test_fail_on_and_ignore(tmp: Path) -> None:
    script = write(tmp, "print(model.weight.grad)")
    bf16 = tmp / "bf16.py"
    bf16.write_text(SCRIPT.format(folder=tmp.name, ending="").replace(
        "model = torch.nn.Linear(4, 1)", "model = torch.nn.Linear(4, 1).bfloat16()").replace(
        "torch.randn(8, 4)", "torch.randn(8, 4, dtype=torch.bfloat16)"))
    assert traindoc("run", "--fail-on", "warning", str(script)).returncode == 0
    failed = traindoc("run", "--fail-on", "warning", str(bf16))
    assert failed.returncode == 3, failed.stderr
    assert "traindoc: [warning] bf16-master-weights at step 0" in failed.stderr  # announced live
    assert traindoc("run", "--fail-on", "warning", "--ignore", "bf16-master-weights,update-underflow",
                    str(bf16)).returncode == 0


def test_record_then_analyze_replays_the_same_findings(tmp: Path) -> None:
    bf16 = tmp / "bf16.py"
    bf16.write_text(SCRIPT.format(folder=tmp.name, ending="").replace(
        "torch.nn.Linear(4, 1)", "torch.nn.Linear(4, 1).to(torch.bfloat16)").replace(
        "torch.randn(8, 4)", "torch.randn(8, 4, dtype=torch.bfloat16)"))
    live = traindoc("run", "--record", str(tmp / "run.jsonl"), "--json", str(tmp / "live.json"), str(bf16))
    assert live.returncode == 0, live.stderr
    replay = traindoc("analyze", str(tmp / "run.jsonl"), "--json", str(tmp / "replay.json"))
    assert replay.returncode == 0, replay.stderr
    a, b = (json.loads((tmp / n).read_text())["findings"] for n in ("live.json", "replay.json"))
    assert a == b and a


def test_explain(tmp: Path) -> None:
    out = traindoc("explain", "update-underflow")
    assert out.returncode == 0 and "## What to try" in out.stdout and "[error]" in out.stdout
    bad = traindoc("explain", "update-underflw")
    assert bad.returncode == 2 and "Did you mean update-underflow?" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_bad_input_is_one_line_exit_2(tmp: Path) -> None:
    for args in (["run", str(tmp / "missing.py")], ["run"], ["analyze", str(tmp / "none.jsonl")],
                 ["run", "--json", str(tmp / "no" / "dir" / "r.json"), str(write(tmp))],
                 ["run", "--ignore", "not-an-id", str(write(tmp))], ["run", "--level", "max", "x.py"]):
        out = traindoc(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith("Error: ") and "Traceback" not in out.stderr, out.stderr
    garbage = tmp / "g.jsonl"
    garbage.write_text("{not json\n")
    out = traindoc("analyze", str(garbage))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "g.jsonl:1" in out.stderr


def test_ctrl_c_still_reports(tmp: Path) -> None:
    out = traindoc("run", str(write(tmp, "raise KeyboardInterrupt")))
    assert out.returncode == -2  # death by SIGINT, as `python train.py` (a shell shows 130)
    assert "KeyboardInterrupt" in out.stderr and "traindoc report" in out.stderr
    assert "status interrupted" in out.stderr


@pytest.mark.parametrize("argv,parsed", [
    # a command line of the script's own, as the value of --resume-args: "--init_from=resume"
    # alone read as an option of traindoc's and stopped the run with a usage error
    (["preflight", "--resume-args", "--init_from=resume", "train.py", "--lr", "3"],
     ["preflight", "--resume-args=--init_from=resume", "train.py", "--lr", "3"]),
    (["preflight", "--resume-args", "--resume out/last.pt", "train.py"],
     ["preflight", "--resume-args=--resume out/last.pt", "train.py"]),
    # the script's own --resume-args stays the script's
    (["preflight", "train.py", "--resume-args", "--x"], ["preflight", "train.py", "--resume-args", "--x"]),
])
def test_command_line_option_values(argv: list[str], parsed: list[str]) -> None:
    from traindoc.cli import _option_values

    assert _option_values(argv) == parsed
