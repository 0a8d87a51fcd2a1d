"""`traindoc preflight` is a gate run before the long job (`traindoc preflight train.py && sbatch
train.sh`): a failed probe exits 3 with no --fail-on, so the job after `&&` does not start;
`--fail-on never` turns the gate off; a script whose probes pass lets the job start."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from conftest import ENV, ROOT, traindoc

ZOO = ROOT / "zoo"


def _chained(tmp_path: Path, script: str, *options: str) -> tuple[subprocess.CompletedProcess[str], bool]:
    """``traindoc preflight ... && touch started`` in a shell: did the next command start?"""
    pre = shlex.join([sys.executable, "-m", "traindoc", "preflight", "--only", "initial-loss", *options,
                      str(ZOO / script)])
    ran = subprocess.run(["bash", "-c", f"{pre}; rc=$?; [ $rc -eq 0 ] && touch started; exit $rc"],
                         capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    return ran, (tmp_path / "started").exists()


def test_a_failed_probe_exits_3_without_fail_on_and_stops_the_chain(tmp_path: Path) -> None:
    ran, started = _chained(tmp_path, "bad_init_scaled_head.py")
    assert ran.returncode == 3 and not started, ran.stderr[-3000:]
    assert "initial-loss  fail" in ran.stderr
    assert "1 probe(s) failed (initial-loss): exit 3" in ran.stderr and "--fail-on never" in ran.stderr


def test_fail_on_never_turns_the_gate_off(tmp_path: Path) -> None:
    ran, started = _chained(tmp_path, "bad_init_scaled_head.py", "--fail-on", "never")
    assert ran.returncode == 0 and started, ran.stderr[-3000:]
    assert "initial-loss  fail" in ran.stderr and "probe(s) failed" not in ran.stderr


def test_passing_probes_let_the_job_start(tmp_path: Path) -> None:
    ran, started = _chained(tmp_path, "healthy_mlp.py")
    assert ran.returncode == 0 and started, ran.stderr[-3000:]
    assert "initial-loss  pass" in ran.stderr


def test_help_says_it_is_a_gate() -> None:
    ran = traindoc("preflight", "--help")
    assert ran.returncode == 0
    text = " ".join(ran.stdout.split())
    assert "{error,warning,info,never}" in text and "exit 3 when a probe fails (the default" in text
    assert "traindoc preflight train.py && sbatch train.sh" in text
    assert "3 a probe failed" in text
