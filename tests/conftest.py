from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# Property tests draw the same examples on every run (a suite that passes once passes again); a
# case a random draw found once is kept in the test as an explicit @example. To search afresh:
# HYPOTHESIS_PROFILE=explore python -m pytest tests/test_series.py
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
GOLDEN = ROOT / "tests" / "golden"
# One OpenMP thread: tiny models run 10-100x faster beside other work, and bit-reproducibly.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


# A guard against a hang, not a speed judgement: a two-rank zoo case takes over 120 s of wall time
# (interpreter start-ups included) when other jobs keep the two cores busy (load 17 here).
TIMEOUT_S = 300.0


# torch's own abort of a gloo rank at the interpreter's exit: torch keeps the process group past
# destroy_process_group(), and a gloo worker thread that destroys a finished all-reduce's work a
# moment late (a starved thread, on a loaded machine) needs the GIL while the interpreter
# finalizes, and the C++ runtime aborts (gdb: ~AsyncAllreduceWork in ProcessGroupGloo::runLoop,
# take_gil in Py_FinalizeEx). Seen without traindoc in 4 of 72 runs of a two-rank DDP job in a
# loop beside other work; everything the job does, traindoc's report included, is over by then.
TORCH_EXIT_ABORT = "terminate called without an active exception"


def torch_exit_abort(out: subprocess.CompletedProcess[str]) -> bool:
    return out.returncode != 0 and TORCH_EXIT_ABORT in (out.stderr or "")


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` capturing text; a multi-rank job that torch aborted at its exit (see
    ``TORCH_EXIT_ABORT``) runs once more, from the start."""
    out: subprocess.CompletedProcess[str] = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if torch_exit_abort(out):
        out = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    return out


def traindoc(*args: str, cwd: Path | None = None, timeout: float = TIMEOUT_S,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh interpreter, as a user would (``env`` over the tests' own)."""
    return run([sys.executable, "-m", "traindoc", *args], env={**ENV, **(env or {})}, cwd=cwd, timeout=timeout)


def python(*args: str, cwd: Path | None = None, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, *args], env=ENV, cwd=cwd, timeout=timeout)


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
        out = cls._run(argv, cwd, timeout, preload)
        return cls._run(argv, cwd, timeout, preload) if torch_exit_abort(out) else out

    @classmethod
    def _run(cls, argv: list[str], cwd: Path | None, timeout: float,
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
