"""W&B offline runs: a sweep logged by the real ``wandb`` package in offline mode
(WANDB_MODE=offline, WANDB_DIR a temporary folder), read back from its ``run-*.wandb`` files
with the package's own protobuf records: one diagnosis per run, by the run's W&B name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fleet_sweeps as fs
from traindoc.cli import main
from traindoc.sources.fleet import wandb_runs

PLANTED = ("divergence", "nan-hidden-by-logging", "exploding-gradients", "val-at-chance")
NAMES = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm", "val_loss": "val/loss",
         "val_acc": "val/acc", "val_f1": "val/f1"}

# Each run in its own wandb.init/finish, as a sweep agent does; in a child process, so that
# wandb's service and its patches stay out of the test process.
_WRITER = """
import json, sys, wandb
runs = json.load(open(sys.argv[1]))
for name, run in runs.items():
    steps = {}
    for signal, points in run.items():
        for s, v in points:
            steps.setdefault(s, {})[signal] = v
    r = wandb.init(project="sweep", name=name, config={"name": name})
    for s in sorted(steps):
        r.log(steps[s], step=s)
    r.finish()
"""


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, set[str]]]:
    pytest.importorskip("wandb")
    folder = tmp_path_factory.mktemp("wandb")
    runs = fs.sweep(planted=PLANTED)
    spec = {name: {NAMES[k]: points for k, points in run.items()} for name, (run, _) in runs.items()}
    (folder / "runs.json").write_text(json.dumps(spec))
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(folder), "WANDB_SILENT": "true",
           "WANDB_DISABLE_GIT": "true"}
    subprocess.run([sys.executable, "-c", _WRITER, str(folder / "runs.json")], env=env, check=True,
                   timeout=300, cwd=folder)
    return folder / "wandb", {name: ids for name, (_, ids) in runs.items()}


def test_offline_sweep_one_diagnosis_per_run(sweep_dir: tuple[Path, dict[str, set[str]]], tmp_path: Path) -> None:
    folder, expect = sweep_dir
    assert len(list(folder.glob("offline-run-*"))) == len(expect)
    out = tmp_path / "fleet.json"
    assert main(["logs", str(folder), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    got = {r["name"].rsplit(" (", 1)[0]: {f["id"] for f in r["report"]["findings"]} for r in doc["runs"]}
    assert got == expect
    for r in doc["runs"]:
        assert r["source"] == "wandb" and r["name"] == f"{r['name'].rsplit(' (', 1)[0]} ({r['id']})"
        assert r["report"]["run"]["steps"] == fs.STEPS
        assert r["report"]["run"]["logs"]["mapping"]["loss"] == "train/loss"


def test_a_cut_run_file_is_read_up_to_the_cut(sweep_dir: tuple[Path, dict[str, set[str]]], tmp_path: Path) -> None:
    folder, _ = sweep_dir
    data = wandb_runs.run_file(next(folder.glob("offline-run-*"))).read_bytes()
    notes: list[str] = []
    assert sum(1 for _ in wandb_runs.records(data[: len(data) // 2], notes)) > 10
    assert len(notes) == 1 and ("cut short" in notes[0] or "ends inside" in notes[0])
    root = tmp_path / "wandb"
    for name, content in (("offline-run-1-abcd1234", data[: len(data) // 2]),
                          ("offline-run-2-zzzz9999", b"hello world, not a run")):
        (root / name).mkdir(parents=True)
        (root / name / f"run-{name[-8:]}.wandb").write_bytes(content)
    out = tmp_path / "cut.json"
    assert main(["logs", str(root), "--json", str(out)]) == 0
    cut, junk = json.loads(out.read_text())["runs"]
    assert cut["report"]["run"]["steps"] > 0 and any("cut short" in n or "ends inside" in n
                                                     for n in cut["report"]["run"]["logs"]["notes"])
    assert junk["report"] is None and "not a W&B run file" in junk["error"]
