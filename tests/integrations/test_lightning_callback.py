"""traindoc.lightning.TraindocCallback on a real Lightning Trainer (tests/integrations/
lightning_train.py: a tiny MLP classifier, CPU): a clean run reports nothing; each planted
failure is reported with the same ids that `traindoc run` reports for the same script;
``TRAINDOC=1`` adds the callback through Lightning's entry point (one session, one report);
the findings survive a save/resume round trip; export=True sends a finding to the trainer's
TensorBoardLogger."""

from __future__ import annotations

import glob
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENV, traindoc

pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                                reason="lightning is not installed (pip install -e '.[dev]')")

SCRIPT = Path(__file__).with_name("lightning_train.py")


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    ran = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                         env={**ENV, **(env or {})}, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran


def alarms(path: Path) -> dict[str, int | None]:
    data = json.loads(path.read_text())
    assert data["disabled"] == [], data["disabled"]
    return {f["id"]: f["step"] for f in data["findings"] if f["severity"] in ("error", "warning")}


@pytest.mark.parametrize("args", [(), ("--accumulate", "4", "--steps", "20")], ids=["clean", "accumulate"])
def test_clean_run_reports_nothing(args: tuple[str, ...], tmp_path: Path) -> None:
    run([str(SCRIPT), *args, "--callback", "cb.json"], tmp_path)
    assert alarms(tmp_path / "cb.json") == {}


@pytest.mark.parametrize("bug, expected", [
    ("tiny_lr", {"tiny-updates"}),
    ("detached_branch", {"no-gradient"}),
    ("bf16_true", {"bf16-master-weights"}),  # precision="bf16-true" casts the module in setup
])
def test_planted_failure_same_ids_as_traindoc_run(bug: str, expected: set[str], tmp_path: Path) -> None:
    run([str(SCRIPT), "--bug", bug, "--callback", "cb.json"], tmp_path)
    found = alarms(tmp_path / "cb.json")
    assert expected <= set(found)
    run(["-m", "traindoc", "run", "--json", "run.json", str(SCRIPT), "--bug", bug], tmp_path)
    assert found == alarms(tmp_path / "run.json")


def test_traindoc_env_adds_the_callback_with_no_code_change(tmp_path: Path) -> None:
    # TRAINDOC=1 opens the session when torch is imported (the autostart) and Lightning's
    # callbacks_factory entry point adds the callback, which joins it: one session, one report.
    ran = run([str(SCRIPT), "--bug", "detached_branch"], tmp_path,
              {"TRAINDOC": "1", "TRAINDOC_JSON": str(tmp_path / "env.json")})
    assert ran.stderr.count("traindoc report") == 1
    assert alarms(tmp_path / "env.json") == {"no-gradient": 0}
    from lightning.pytorch.trainer.connectors.callback_connector import _load_external_callbacks

    names = [type(cb).__name__ for cb in _load_external_callbacks("lightning.pytorch.callbacks_factory")]
    assert "TraindocCallback" not in names  # off unless TRAINDOC is set


def test_findings_survive_a_checkpoint_resume(tmp_path: Path) -> None:
    # The first fit has a detached branch and finds it; the resumed fit has no bug of its own
    # but its report keeps the finding, restored from the callback's state in the checkpoint:
    # as a note, since the branch gets its gradients after the resume.
    run([str(SCRIPT), "--bug", "detached_branch", "--steps", "16", "--save-ckpt", "c.ckpt",
         "--callback", "first.json"], tmp_path)
    assert alarms(tmp_path / "first.json") == {"no-gradient": 0}
    import torch

    # plain data: Lightning 2.x loads a checkpoint with torch.load's default, weights_only=True
    state = torch.load(tmp_path / "c.ckpt", weights_only=True)["callbacks"]["TraindocCallback"]
    assert [f["id"] for f in state["engine"]["findings"]] == ["no-gradient"]
    run([str(SCRIPT), "--steps", "32", "--resume", "c.ckpt", "--callback", "resumed.json"], tmp_path)
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    (first,) = [f for f in json.loads((tmp_path / "first.json").read_text())["findings"] if f["id"] == "no-gradient"]
    (kept,) = [f for f in resumed["findings"] if f["id"] == "no-gradient"]
    assert (kept["step"], kept["where"], kept["severity"]) == (first["step"], first["where"], "info")
    assert kept["evidence"]["first_gradient_step"] >= 16
    run([str(SCRIPT), "--steps", "32", "--resume", "c.ckpt"], tmp_path)  # the resume itself is healthy


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is a dev extra")
def test_export_to_the_trainers_tensorboard_logger(tmp_path: Path) -> None:
    run([str(SCRIPT), "--bug", "detached_branch", "--callback", "cb.json", "--tb-logger", "tb"], tmp_path)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [events] = glob.glob(str(tmp_path / "tb" / "events.out.tfevents.*"))
    acc = EventAccumulator(events, size_guidance={"tensors": 0})
    acc.Reload()
    [finding] = acc.Tensors("traindoc/findings/text_summary")
    assert finding.step == 0 and "`no-gradient`" in finding.tensor_proto.string_val[0].decode()
    assert "no-gradient" in acc.Tensors("traindoc/report/text_summary")[0].tensor_proto.string_val[0].decode()


def test_lightning_ddp_fork_ranks_are_followed(tmp_path: Path) -> None:
    """Lightning's ddp_fork (ddp_notebook) starts its ranks with mp.start_processes and fork:
    before, the ranks ran with the parent's watch half-copied and the report said no training
    was observed. The zoo's mislabeled-rank case, launched that way."""
    zoo = Path(__file__).resolve().parents[2] / "zoo" / "lightning_ddp_rank_mislabeled.py"
    script, report = tmp_path / "fork_ranks.py", tmp_path / "r.json"
    script.write_text(zoo.read_text().replace('strategy="ddp"', 'strategy="ddp_fork"'))
    out = traindoc("run", "--json", str(report), str(script), timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["run"]["steps"] == 80 and data["run"]["ranks"] == 2
    assert [f["id"] for f in data["findings"] if f["severity"] == "warning"] == ["rank-loss-skew"]

