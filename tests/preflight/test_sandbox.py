"""Preflight runs the script in a folder of its own where your files can be read under the
same relative paths as with ``python train.py`` (linked in), while everything the script writes,
through those links too, stays in that folder: your folder is byte-identical afterwards, and a
folder of yours holding checkpoints is not linked, so a script that resumes by itself starts
fresh."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import traindoc
from traindoc.preflight import sandbox

SCRIPT = Path(__file__).resolve().parent / "scripts" / "relative_files.py"


def _project(tmp_path: Path) -> Path:
    """The user's folders: the script with its settings, data and logs, and a vocabulary above."""
    (tmp_path / "vocab.txt").write_text(" ".join(f"w{i}" for i in range(20)))
    work = tmp_path / "project"
    (work / "data").mkdir(parents=True)
    (work / "logs").mkdir()
    (work / "out").mkdir()
    shutil.copy(SCRIPT, work / "train.py")
    (work / "config_overrides.py").write_text("steps = 60\n")
    rng = np.random.default_rng(0)
    np.array([(3 * k + int(rng.integers(0, 2))) % 20 for k in range(4000)], dtype=np.uint16).tofile(work / "data" / "train.bin")
    (work / "logs" / "train.log").write_text("the user's log of an earlier run\n")
    (work / "out" / "notes.txt").write_text("the user's notes\n")
    return work


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _preflight(work: Path, tmp_path: Path) -> dict[str, str]:
    report = tmp_path / "pf.json"
    ran = traindoc("preflight", "--json", str(report), "train.py", cwd=work, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return {v["probe"]: v["status"] for v in json.loads(report.read_text())["preflight"]["probes"]}


def test_relative_reads_work_and_writes_stay_in_the_launch_folder(tmp_path: Path) -> None:
    work = _project(tmp_path)
    before = _files(tmp_path)
    statuses = _preflight(work, tmp_path)
    assert statuses == dict.fromkeys(("initial-loss", "gradients", "overfit", "eval", "resume", "lr"), "pass")
    after = _files(tmp_path)
    after.pop("pf.json")
    assert after == before


def test_a_folder_holding_checkpoints_is_not_linked(tmp_path: Path) -> None:
    """out/ holds a checkpoint of an earlier run at step 50: linked, every launch would resume
    from it (the baseline would start at step 50 and the resume probe compare nothing fresh)."""
    import torch

    work = _project(tmp_path)
    torch.save({"model": {}, "optimizer": {}, "step": 50, "rng": torch.get_rng_state()}, work / "out" / "ckpt.pt")
    before = _files(tmp_path)
    statuses = _preflight(work, tmp_path)
    assert statuses["resume"] == "pass" and statuses["initial-loss"] == "pass"
    after = _files(tmp_path)
    after.pop("pf.json")
    assert after == before


@pytest.fixture()
def launch(tmp_path: Path):
    """A user's folder linked into a launch folder, with the write guard on."""
    user = tmp_path / "user"
    (user / "runs" / "old").mkdir(parents=True)
    (user / "runs" / "old" / "log.txt").write_text("old")
    (user / "runs" / "metrics.csv").write_text("a,b\n")
    folder = tmp_path / "launch"
    work = sandbox.prepare(folder, user, sandbox.links(user))
    cwd = os.getcwd()
    os.chdir(work)
    sandbox.guard_writes(folder)
    try:
        yield user, work
    finally:
        sandbox.end_guard()
        os.chdir(cwd)


def test_writes_through_links_stay_in_the_launch_folder(launch: tuple[Path, Path]) -> None:
    user, work = launch
    before = _files(user)
    assert open("runs/old/log.txt").read() == "old"  # read through the link
    with open("runs/metrics.csv", "a") as f:  # an append: a copy of the user's file
        f.write("1,2\n")
    with open("runs/old/log.txt", "w") as f:  # a rewrite
        f.write("new")
    os.makedirs("runs/new", exist_ok=True)
    os.replace("runs/metrics.csv", "runs/new/metrics.csv")
    shutil.rmtree("runs/old")
    assert (work / "runs" / "new" / "metrics.csv").read_text() == "a,b\n1,2\n"
    assert not (work / "runs" / "old").exists()
    assert _files(user) == before


def test_outside_a_launch_nothing_is_guarded(launch: tuple[Path, Path]) -> None:
    user, work = launch
    sandbox.end_guard()
    with open("runs/metrics.csv", "a") as f:  # the link now writes through, as any link would
        f.write("1,2\n")
    assert (user / "runs" / "metrics.csv").read_text() == "a,b\n1,2\n"
