"""One real case of each face (run, analyze, logs, ckpt diff) and the demo, each written with
--json and --html once per test session (cached), for the report tests to read."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from conftest import ROOT, traindoc  # noqa: E402

DEMO = ROOT / "src" / "traindoc" / "demo_scripts"


@dataclass(frozen=True)
class Case:
    name: str
    json: Path
    html: Path
    code: int
    stderr: str

    def data(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.json.read_text(encoding="utf-8"))
        return loaded


@functools.lru_cache(maxsize=None)
def _folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="traindoc-report-tests-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _run(name: str, *args: str, cwd: Path | None = None, words: int = 1) -> Case:
    """``traindoc`` with ``args``, --json and --html put after the face's ``words``."""
    out = _folder() / name
    out.mkdir(exist_ok=True)
    ran = traindoc(*args[:words], "--json", str(out / "r.json"), "--html", str(out / "r.html"), *args[words:],
                   cwd=cwd, timeout=300)
    assert (out / "r.json").is_file(), ran.stderr[-3000:]
    return Case(name, out / "r.json", out / "r.html", ran.returncode, ran.stderr)


@functools.lru_cache(maxsize=None)
def case(name: str) -> Case:
    """A face's report: ``run-bf16`` and ``run-nan`` (the demo's scripts, live), ``analyze``
    (a recorded loss spike), ``logs`` (a finished run's CSV), ``ckpt`` (a bf16 checkpoint pair),
    ``healthy`` (a healthy live run)."""
    if name.startswith("run-") or name == "healthy":
        script = {"run-bf16": "bf16_master.py", "run-nan": "nan_masked_loss.py",
                  "healthy": "healthy_bf16_autocast.py"}[name]
        work = _folder() / f"{name}-src"
        work.mkdir(exist_ok=True)
        shutil.copyfile(DEMO / script, work / script)  # the user's folder, as `traindoc demo` does
        return _run(name, "run", script, cwd=work)
    if name == "analyze":
        return _run(name, "analyze", str(ROOT / "tests" / "golden" / "loss_spike.jsonl"))
    if name == "logs":
        return _run(name, "logs", str(ROOT / "tests" / "fixtures" / "logs" / "seeds" / "seed001_grad_f1.csv"))
    if name == "ckpt":
        sys.path.insert(0, str(TESTS / "ckpt"))
        import ckpt_fixtures

        old, new = ckpt_fixtures.bf16_pair(_folder())
        return _run(name, "ckpt", "diff", str(old), str(new), words=2)
    raise KeyError(name)


FACES = ("run-bf16", "run-nan", "analyze", "logs", "ckpt")
face_cases = pytest.mark.parametrize("name", FACES)
