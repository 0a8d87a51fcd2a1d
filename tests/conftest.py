from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
# One OpenMP thread: tiny models run 10-100x faster beside other work, and bit-reproducibly.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


# A guard against a hang, not a speed judgement: a two-rank zoo case takes over 120 s of wall time
# (interpreter start-ups included) when other jobs keep the two cores busy (load 17 here).
TIMEOUT_S = 300.0


def traindoc(*args: str, cwd: Path | None = None, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "traindoc", *args], capture_output=True, text=True,
                          env=ENV, cwd=cwd, timeout=timeout)


def python(*args: str, cwd: Path | None = None, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=ENV, cwd=cwd,
                          timeout=timeout)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
