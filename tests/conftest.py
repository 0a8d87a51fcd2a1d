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


# What the warm servers import up front: torch's modules every case uses; for ``traindoc run``,
# traindoc's too. The bare runs' server imports nothing of traindoc.
WARM_BARE = ("torch", "torch.nn", "torch.optim", "torch.utils.data", "torch.distributed", "numpy")
WARM_TRAINDOC = (*WARM_BARE, "traindoc.cli", "traindoc.live.runner", "traindoc.live.probes", "traindoc.detectors")


class WarmPython:
    """``warm_python.py`` run as a server: commands in children forked from an interpreter that
    has imported torch (one per test worker, started on first use)."""

    _servers: dict[tuple[str, ...], subprocess.Popen[str]] = {}

    @classmethod
    def run(cls, argv: list[str], cwd: Path | None, timeout: float,
            preload: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        import json
        import select
        import signal
        import tempfile

        server = cls._servers.get(preload)
        if server is None or server.poll() is not None:
            server = cls._servers[preload] = subprocess.Popen(
                [sys.executable, str(ROOT / "tests" / "warm_python.py"), *preload],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV)
        assert server.stdin is not None and server.stdout is not None
        with tempfile.TemporaryDirectory() as d:
            out, err = Path(d) / "out", Path(d) / "err"
            server.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd or Path.cwd()), "out": str(out),
                                           "err": str(err)}) + "\n")
            server.stdin.flush()
            pid = json.loads(server.stdout.readline())["pid"]
            ready, _, _ = select.select([server.stdout], [], [], timeout)
            if not ready:
                os.killpg(pid, signal.SIGKILL)
            code = json.loads(server.stdout.readline())["returncode"]
            if not ready:
                raise subprocess.TimeoutExpired(argv, timeout, out.read_text(errors="replace"),
                                                err.read_text(errors="replace"))
            return subprocess.CompletedProcess(argv, code, out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))


def warm_traindoc(*args: str, cwd: Path | None = None, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``traindoc(...)`` in a child of an interpreter with torch imported (``warm_python.py``)."""
    return WarmPython.run(["-m", "traindoc", *args], cwd, timeout, WARM_TRAINDOC)


def warm_python(*args: str, cwd: Path | None = None, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``python(...)`` in a child of an interpreter with torch imported (``warm_python.py``)."""
    return WarmPython.run(list(args), cwd, timeout, WARM_BARE)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
