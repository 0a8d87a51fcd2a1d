"""Bad input is one `Error:` line with what to do, exit 2, never a traceback (fuzzed too)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_fixtures import Made, made  # noqa: F401
from conftest import traindoc
from traindoc.cli import main


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(["ckpt", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


def test_missing_empty_and_garbage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no such file or folder" in _error(capsys, "inspect", str(tmp_path / "nope.pt"))
    (tmp_path / "empty.pt").write_bytes(b"")
    assert "is empty (0 bytes)" in _error(capsys, "inspect", str(tmp_path / "empty.pt"))
    (tmp_path / "junk.pt").write_bytes(os.urandom(4096))
    assert "truncated, corrupt or not a checkpoint" in _error(capsys, "inspect", str(tmp_path / "junk.pt"))
    (tmp_path / "junk.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    assert "cannot read it as a safetensors file" in _error(capsys, "inspect", str(tmp_path / "junk.safetensors"))
    (tmp_path / "list.pt").write_bytes(b"")
    import torch

    torch.save([1, 2, 3], tmp_path / "list.pt")
    assert "holds a list, not a checkpoint" in _error(capsys, "inspect", str(tmp_path / "list.pt"))


def test_truncated_files(made: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for src in (made.complete, made.safetensors):
        data = src.read_bytes()
        cut = tmp_path / f"cut{src.suffix}"
        cut.write_bytes(data[: len(data) // 2])
        msg = _error(capsys, "inspect", str(cut))
        assert "truncated" in msg and str(cut) in msg


def test_folders(made: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no checkpoint found" in _error(capsys, "inspect", str(tmp_path))
    runs = tmp_path / "runs"
    (runs / "checkpoint-500").mkdir(parents=True)
    (runs / "checkpoint-1000").mkdir()
    assert f"pick one, e.g. {runs / 'checkpoint-1000'}" in _error(capsys, "inspect", str(runs))
    broken = tmp_path / "broken"
    shutil.copytree(made.hf_sharded, broken)
    (broken / "model-00002-of-00002.safetensors").unlink()
    assert "which is missing" in _error(capsys, "inspect", str(broken))


def test_diff_of_unrelated_models(made: Made, capsys: pytest.CaptureFixture[str]) -> None:
    msg = _error(capsys, "diff", str(made.bare), str(made.unrelated))
    assert "share no tensor names" in msg and "different models" in msg


def test_no_traceback_in_a_real_process(tmp_path: Path) -> None:
    (tmp_path / "empty.ckpt").write_bytes(b"")  # fails before torch is imported: a fast subprocess
    out = traindoc("ckpt", "diff", str(tmp_path / "empty.ckpt"), str(tmp_path / "x.pt"))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"Error: {tmp_path / 'empty.ckpt'} is empty (0 bytes): the save was interrupted " \
                         "or the copy failed; use an earlier checkpoint\n"


_FUZZ = settings(max_examples=40, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(data=st.binary(min_size=1, max_size=3000), suffix=st.sampled_from([".pt", ".safetensors", ".ckpt"]))
def test_fuzz_random_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, suffix: str) -> None:
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(data)
    code = main(["ckpt", "inspect", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("Error: ") and "Traceback" not in err


@_FUZZ
@given(which=st.sampled_from(["complete", "safetensors", "legacy"]), cut=st.floats(0.0, 1.0),
       flip=st.integers(0, 1 << 30))
def test_fuzz_damaged_checkpoints(made: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  which: str, cut: float, flip: int) -> None:
    """Truncated or bit-flipped real checkpoints: a clean report or a clean Error, nothing else."""
    src = getattr(made, which)
    data = bytearray(src.read_bytes())
    data = data[: max(1, int(len(data) * cut))] if cut < 0.999 else data
    if flip % 3 == 0 and data:
        data[flip % len(data)] ^= 0xFF
    path = tmp_path / f"damaged{src.suffix}"
    path.write_bytes(bytes(data))
    code = main(["ckpt", "inspect", str(path)])
    err = capsys.readouterr().err
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 2:
        assert err.startswith("Error: ") and len(err.strip().splitlines()) == 1
