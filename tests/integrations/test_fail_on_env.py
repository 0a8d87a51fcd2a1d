"""``TRAINDOC=1 TRAINDOC_FAIL_ON=<severity> python train.py`` exits 3 when the script succeeded
and a finding is at or above the severity; the script's own failure keeps its exit code."""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENV

pytestmark = pytest.mark.skipif(
    not any((Path(d) / "traindoc-autostart.pth").is_file() for d in site.getsitepackages()),
    reason="traindoc is not installed with pip here (pip install -e .): no TRAINDOC=1 autostart")

TRAIN = """
import sys
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=LR)
x, y = torch.randn(64, 8), torch.randn(64, 1)
log = open("log.txt", "w")  # never closed: the exit must still write it out
for step in range(30):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    log.write(f"{step} {loss.item():.4f}\\n")
print("trained")
ENDING
"""


def run(tmp: Path, lr: str = "1e-9", ending: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    (tmp / "train.py").write_text(TRAIN.replace("LR", lr).replace("ENDING", ending))
    base = {k: v for k, v in ENV.items() if not k.startswith("TRAINDOC")}
    return subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, cwd=tmp,
                          env={**base, "TRAINDOC": "1", **env}, timeout=120)


def test_findings_at_or_above_the_severity_exit_3(tmp_path: Path) -> None:
    ran = run(tmp_path, TRAINDOC_FAIL_ON="warning")  # lr 1e-9: tiny-updates, a warning
    assert ran.returncode == 3, ran.stderr[-2000:]
    assert "trained" in ran.stdout and "traindoc report" in ran.stderr
    assert "exit code 3: " in ran.stderr and "tiny-updates (warning)" in ran.stderr
    assert len((tmp_path / "log.txt").read_text().splitlines()) == 30  # flushed before the exit


def test_below_the_severity_unset_or_healthy_exit_0(tmp_path: Path) -> None:
    assert run(tmp_path, TRAINDOC_FAIL_ON="error").returncode == 0  # only a warning here
    assert run(tmp_path).returncode == 0  # no TRAINDOC_FAIL_ON: the report only
    healthy = run(tmp_path, lr="1e-2", TRAINDOC_FAIL_ON="warning")
    assert healthy.returncode == 0, healthy.stderr[-2000:]
    assert "exit code 3" not in healthy.stderr


@pytest.mark.parametrize("ending,code", [
    ("sys.exit(5)", 5), ("exit(4)", 4), ("raise RuntimeError('boom')", 1), ("sys.exit(0)", 3),
])
def test_the_scripts_own_exit_code_wins(ending: str, code: int, tmp_path: Path) -> None:
    ran = run(tmp_path, ending=ending, TRAINDOC_FAIL_ON="warning")
    assert ran.returncode == code, ran.stderr[-2000:]


def test_a_bad_value_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    ran = run(tmp_path, TRAINDOC_FAIL_ON="warn")
    assert ran.returncode == 0
    assert "traindoc: TRAINDOC_FAIL_ON must be one of error, warning, info, got 'warn'" in ran.stderr
    assert "Traceback" not in ran.stderr
