"""Checkpoints are untrusted input: nothing in them runs unless the user says --trust."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_fixtures import Made, made, malicious  # noqa: F401
from traindoc.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_malicious_pickle_executes_nothing_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "PWNED"
    zipped, raw = malicious(tmp_path, marker)
    for path in (zipped, raw):
        code, err = _run(capsys, "ckpt", "inspect", str(path))
        assert code == 2
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ")
        assert "holds pickled Python objects (io.open)" in err and "--trust" in err
        assert "Traceback" not in err
    code, _ = _run(capsys, "ckpt", "diff", str(zipped), str(raw))
    assert code == 2
    assert not marker.exists(), "loading the checkpoint ran code from it"


def test_trust_flag_allows_unpickling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "PWNED"
    zipped, _ = malicious(tmp_path, marker)
    code, err = _run(capsys, "ckpt", "inspect", "--trust", str(zipped))
    assert marker.exists()  # with --trust, the payload did run: the flag means what it says
    assert code == 0, err


def test_pickled_module_is_refused_then_inspected_with_trust(made: Made, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "ckpt", "inspect", str(made.module))
    assert code == 2 and "ckpt_fixtures.Net" in err and "torch.save(model.state_dict()" in err
    code, err = _run(capsys, "ckpt", "inspect", "--trust", str(made.module))
    assert code == 0 and "conv.weight" in err
