"""`traindoc run sub/train.py` gives the script what `python sub/train.py` gives it: the same
`__file__` (absolute), `sys.argv`, `sys.path[0]`, `__name__`, `sys.modules["__main__"]`,
traceback file names and exit code; `--fail-on` decides only when the script succeeded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_cases import traindoc

from conftest import python

SHOW = """
import json, os, sys
import torch
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad(); model(torch.ones(4, 2)).pow(2).mean().backward(); opt.step()
here = os.path.join(os.path.dirname(__file__), "data.txt")  # scripts build paths from __file__
print(json.dumps({"file": __file__, "argv": sys.argv, "path0": sys.path[0], "name": __name__,
                  "main": sys.modules["__main__"].__dict__ is globals(), "data": open(here).read(),
                  "loader": type(__loader__).__name__}))
if sys.argv[1:] == ["raise"]:
    raise ValueError("from the script")
if sys.argv[1:] and sys.argv[1].isdigit():
    sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "show.py").write_text(SHOW)
    (tmp_path / "sub" / "data.txt").write_text("next to the script")
    return tmp_path


def test_the_script_sees_what_python_gives_it(project: Path) -> None:
    plain = python("sub/show.py", "--flag", cwd=project)
    under = traindoc("run", "sub/show.py", "--flag", cwd=project)
    assert plain.returncode == under.returncode == 0, under.stderr[-2000:]
    seen, expected = json.loads(under.stdout), json.loads(plain.stdout)
    assert seen == expected
    assert Path(seen["file"]).is_absolute() and seen["argv"] == ["sub/show.py", "--flag"]


@pytest.mark.parametrize("argv, code", [(["3"], 3), (["0"], 0), (["raise"], 1)])
def test_exit_codes_and_tracebacks_are_the_scripts(project: Path, argv: list[str], code: int) -> None:
    plain = python("sub/show.py", *argv, cwd=project)
    under = traindoc("run", "--fail-on", "info", "sub/show.py", *argv, cwd=project)
    assert plain.returncode == code and under.returncode == code
    if code == 1:
        frame = plain.stderr.split("Traceback (most recent call last):\n")[1].split("\n")[0]
        assert frame in under.stderr  # the same file name (absolute) and line


def test_fail_on_decides_when_the_script_succeeded(project: Path) -> None:
    (project / "sub" / "bad.py").write_text(
        "import torch\n"
        "model = torch.nn.Linear(2, 1).to(torch.bfloat16)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        "for _ in range(30):\n"
        "    opt.zero_grad(); model(torch.ones(4, 2, dtype=torch.bfloat16)).float().pow(2).mean().backward(); opt.step()\n")
    ran = traindoc("run", "--fail-on", "warning", "sub/bad.py", cwd=project)
    assert ran.returncode == 3, ran.stderr[-2000:]
