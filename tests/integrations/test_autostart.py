"""``TRAINDOC=1 python train.py``: the traindoc-autostart.pth that the package installs opens a
live session when the script imports torch and reports at exit; unset, nothing happens."""

from __future__ import annotations

import ast
import json
import site
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENV, ROOT

TRAIN = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=LR)
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(30):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained")
"""


def python(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in ENV.items() if not k.startswith("TRAINDOC")}
    ran = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                         env={**base, **env}, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN.replace("LR", "1e-9"))  # far too low: the weights never move
    return path


def test_the_pth_line_is_installed() -> None:
    """The installed line is the one setup.py ships (a stale install would test old code)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    [expected] = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                  and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["LINE"]]
    installed = [Path(d) / "traindoc-autostart.pth" for d in site.getsitepackages()]
    found = [p for p in installed if p.is_file()]
    if not found:
        pytest.skip("traindoc is not installed with pip here (pip install -e .)")
    assert found[0].read_text() == expected


def test_traindoc_1_reports_at_exit(script: Path, tmp_path: Path) -> None:
    ran = python([str(script)], tmp_path, TRAINDOC="1", TRAINDOC_JSON=str(tmp_path / "r.json"))
    assert "trained" in ran.stdout and ran.stderr.count("traindoc report") == 1
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["run"]["steps"] == 30
    assert "tiny-updates" in {f["id"] for f in data["findings"]}


def test_unset_or_zero_does_nothing(script: Path, tmp_path: Path) -> None:
    for value in (None, "0", ""):
        env = {"TRAINDOC": value} if value is not None else {}
        ran = python([str(script)], tmp_path, **env)
        assert "traindoc" not in ran.stderr


def test_no_torch_import_and_no_report_without_training(tmp_path: Path) -> None:
    ran = python(["-c", "import sys; print('torch' in sys.modules)"], tmp_path, TRAINDOC="1")
    assert ran.stdout.strip() == "False" and ran.stderr == ""
    ran = python(["-c", "import torch; torch.ones(2) * 2"], tmp_path, TRAINDOC="1")
    assert ran.stderr == ""  # a process that never trained (a launcher, a worker) says nothing


def test_traindoc_run_is_not_watched_twice(script: Path, tmp_path: Path) -> None:
    ran = python(["-m", "traindoc", "run", "--json", "r.json", str(script)], tmp_path, TRAINDOC="1")
    assert ran.stderr.count("traindoc report") == 1
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["run"]["steps"] == 30  # one session: each step counted once


SPAWN = """
import torch
import torch.multiprocessing as mp


def worker(rank):
    torch.manual_seed(rank)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-9)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    for _ in range(30):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    mp.spawn(worker, nprocs=2)
"""


def test_mp_spawn_children_are_not_started_twice(tmp_path: Path) -> None:
    # The children inherit TRAINDOC=1; the parent's session follows them (live/spawn.py), so
    # the autostart stays out of them: one report, rank 0's, each step counted once.
    (tmp_path / "spawn_train.py").write_text(SPAWN)
    ran = python(["spawn_train.py"], tmp_path, TRAINDOC="1", TRAINDOC_JSON=str(tmp_path / "r.json"))
    assert ran.stderr.count("traindoc report") == 1
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["run"]["steps"] == 30 and "tiny-updates" in {f["id"] for f in data["findings"]}
