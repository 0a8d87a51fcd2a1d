"""The rollback guard: off by default, bit-identical when nothing happens, and on a loss spike
or a NaN it restores the last good state, lowers the LR and, after N rollbacks, stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import traindoc
import zoo_cases as zoo
from traindoc.live.guard import GuardConfig, GuardStop
from _spiky import train
from conftest import python, traindoc as cli


def guarded(**kwargs: object):  # type: ignore[no-untyped-def]
    options = kwargs.pop("guard", True)
    with traindoc.watch(announce=False, guard=options) as doc:
        out = train(**kwargs)  # type: ignore[arg-type]
    return doc, out


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="factor must be in"):
        GuardConfig(factor=2.0)
    with pytest.raises(ValueError, match="every must be >= 1"):
        GuardConfig(every=0)


def test_guard_without_incidents_leaves_training_bit_identical() -> None:
    bare, _, _ = train()
    doc, (model, lrs, _) = guarded()
    for a, b in zip(bare.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)
    assert set(lrs) == {1e-2}
    assert "guard-rollback" not in {f.id for f in doc.report().findings}


def test_a_loss_spike_rolls_back_and_halves_the_lr() -> None:
    bare, bare_lrs, _ = train(bad=(30,))
    doc, (model, lrs, after) = guarded(bad=(30,))
    f = {f.id: f for f in doc.report().findings}["guard-rollback"]
    ev = f.evidence
    assert ev["rollbacks"] == 1 and ev["triggers"] == ["loss-spike"] and ev["stopped"] is False
    step, restored = ev["steps"][0], ev["restored_steps"][0]
    assert 30 <= step <= 33 and restored <= 28  # a state from before the spike
    for a, b in zip(after[step], after[restored]):
        assert torch.equal(a, b)  # right after the rollback step: the restored parameters
    assert lrs[step - 1] == 1e-2 and lrs[step] == 5e-3 and lrs[-1] == 5e-3
    assert ev["lr_before"] == [1e-2] and ev["lr_after"] == [5e-3]
    assert "lowered the LR from 0.01 to 0.005" in f.message and f.severity == "info"
    assert "loss-spike" in {f.id for f in doc.report().findings}
    assert set(bare_lrs) == {1e-2}  # without the guard nothing changes


def test_a_scheduler_keeps_the_lowered_lr() -> None:
    _, (_, lrs, _) = guarded(bad=(30,), schedule=True)  # LambdaLR recomputes lr from base_lrs
    assert lrs[-1] == 5e-3


def test_a_nan_loss_rolls_back_to_finite_parameters() -> None:
    doc, (model, lrs, after) = guarded(nan=(25,))
    f = {f.id: f for f in doc.report().findings}["guard-rollback"]
    assert f.evidence["triggers"] == ["nonfinite"] and f.evidence["steps"] == [25]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert lrs[-1] == 5e-3


def test_the_guard_stops_after_max_rollbacks() -> None:
    with pytest.raises(GuardStop, match="stopped the training at step"):
        with traindoc.watch(announce=False, guard={"max_rollbacks": 1}) as doc:
            train(bad=(30, 45))
    report = doc.report()
    assert report.run["status"] == "stopped"
    f = {f.id: f for f in report.findings}["guard-rollback"]
    assert f.evidence["stopped"] is True and len(f.evidence["steps"]) == 2
    assert "and stopped the training" in f.message


def test_guard_is_off_by_default_and_its_hooks_go_away() -> None:
    from torch.optim.optimizer import _global_optimizer_post_hooks

    before = len(_global_optimizer_post_hooks)
    with traindoc.watch(announce=False, guard=True):
        pass
    assert len(_global_optimizer_post_hooks) == before
    with traindoc.watch(announce=False) as doc:
        assert doc._guard is None


def test_cli_guard_on_the_zoo_loss_spike(tmp_path: Path) -> None:
    case = zoo.case("loss_spike")
    report, guarded_pt, bare_pt = tmp_path / "r.json", tmp_path / "g.pt", tmp_path / "b.pt"
    ran = cli("run", "--guard", "--json", str(report), str(case.path), "--save", str(guarded_pt))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "traindoc guard: at step" in ran.stderr
    found = {f["id"]: f for f in json.loads(report.read_text())["findings"]}
    assert found["guard-rollback"]["evidence"]["rollbacks"] == 1 and "loss-spike" in found
    plain = python(str(case.path), "--save", str(bare_pt))
    assert plain.returncode == 0
    a, b = torch.load(bare_pt), torch.load(guarded_pt)
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the guard did change this run


def test_cli_guard_stops_with_a_clear_message(tmp_path: Path) -> None:
    script = Path(__file__).parent / "_spiky.py"
    ran = cli("run", "--guard", "--json", str(tmp_path / "r.json"), str(script), "120", "30,45,60,75,90")
    assert ran.returncode == 1
    assert "traindoc --guard stopped the training at step" in ran.stderr and "Traceback" not in ran.stderr
    assert "not reached" not in ran.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["run"]["status"] == "stopped"
    assert {f["id"]: f for f in data["findings"]}["guard-rollback"]["evidence"]["rollbacks"] == 3
