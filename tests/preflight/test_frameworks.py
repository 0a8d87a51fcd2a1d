"""`traindoc preflight` on a Hugging Face Trainer script and a Lightning script (scripts/).

Each gets a verdict from every probe: pass on the healthy script (or n/a with the reason and
how to enable the probe), fail on a planted failure. The data iterator is replaced inside the
trainers (Trainer's and Lightning's DataLoaders), their checkpoints are found and loaded
through their own code (Trainer's checkpoint-N/ folder, Lightning's fsspec writes), and the
user's folders, where a real run already left out/ and lightning_logs/, stay byte-identical.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import traindoc

SCRIPTS = Path(__file__).resolve().parent / "scripts"
PROBES = ("initial-loss", "gradients", "overfit", "eval", "resume", "lr")


def _user_folder(tmp_path: Path, script: str) -> Path:
    """The user's project folder: the script, and what an earlier real run left there."""
    work = tmp_path / "work"
    for rel in ("out/checkpoint-20/optimizer.pt", "out/checkpoint-20/trainer_state.json",
                "lightning_logs/version_0/checkpoints/epoch=3-step=64.ckpt", "lightning_logs/version_0/metrics.csv",
                "checkpoints/last.ckpt"):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(f"the user's {rel}".encode())
    shutil.copy(SCRIPTS / script, work / script)
    return work


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _preflight(tmp_path: Path, script: str, only: str = "", *args: str) -> tuple[dict[str, dict], str]:
    work = _user_folder(tmp_path, script)
    before = _files(work)
    report = tmp_path / "pf.json"
    options = ("--only", only) if only else ()
    ran = traindoc("preflight", "--json", str(report), *options, script, *args, cwd=work, timeout=300)
    assert _files(work) == before  # nothing written, changed or removed in the user's folder
    data = json.loads(report.read_text())
    failed = any(v["status"] == "fail" for v in data["preflight"]["probes"])  # a gate: exit 3
    assert ran.returncode == (3 if failed else 0), ran.stderr[-3000:]
    # Its wall time is not asserted: it follows the machine's load (73 s once, with the test suite
    # and a benchmark sharing two cores); a launch past its budget would change the verdicts.
    return {v["probe"]: v for v in data["preflight"]["probes"]}, ran.stderr


def test_hf_trainer_healthy_passes_every_probe(tmp_path: Path) -> None:
    probes, err = _preflight(tmp_path, "hf_classifier.py")
    assert {p: v["status"] for p, v in probes.items()} == dict.fromkeys(PROBES, "pass"), err[-3000:]
    assert "out/checkpoint-20/" in probes["resume"]["summary"]  # saved and resumed by the Trainer itself
    assert "first cross_entropy" in probes["initial-loss"]["summary"]  # its summed loss, per token


def test_hf_trainer_lr_far_too_low_fails(tmp_path: Path) -> None:
    probes, err = _preflight(tmp_path, "hf_classifier.py", "overfit,lr", "--bug", "tiny_lr")
    assert probes["overfit"]["findings"] == ["cannot-overfit-batch"], err[-3000:]
    assert probes["lr"]["findings"] == ["lr-out-of-range"], err[-3000:]
    assert "AdamW at lr 1.00e-06" in probes["lr"]["summary"]  # the base LR, not the warmup's 0


def test_lightning_healthy_passes_and_says_how_to_enable_resume(tmp_path: Path) -> None:
    probes, err = _preflight(tmp_path, "lightning_classifier.py")
    statuses = {p: v["status"] for p, v in probes.items()}
    assert statuses == {**dict.fromkeys(PROBES, "pass"), "resume": "n/a"}, err[-3000:]
    why = probes["resume"]["summary"]
    assert "lightning_logs/version_0/checkpoints/epoch=0-step=16.ckpt at step 16" in why
    assert "did not load it" in why and "ckpt_path='last'" in why


@pytest.mark.parametrize("bug,probe,id_", [("head_init", "initial-loss", "bad-initial-loss"),
                                           ("tiny_lr", "lr", "lr-out-of-range")])
def test_lightning_planted_failure_fails(bug: str, probe: str, id_: str, tmp_path: Path) -> None:
    probes, err = _preflight(tmp_path, "lightning_classifier.py", probe, "--bug", bug)
    assert probes[probe]["status"] == "fail" and probes[probe]["findings"] == [id_], err[-3000:]


def test_lightning_resume_without_the_rng_state_fails(tmp_path: Path) -> None:
    probes, err = _preflight(tmp_path, "lightning_classifier.py", "resume", "--resume")
    assert probes["resume"]["findings"] == ["resume-mismatch"], err[-3000:]
    assert "Not restored at step 16: torch RNG state" in err and "the batch (the data position)" in err
