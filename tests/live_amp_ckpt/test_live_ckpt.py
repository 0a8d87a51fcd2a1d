"""The live checkpoint probes, from code: what torch.save writes, how it is put in place, and
what optimizer/scheduler load_state_dict restores."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc import record
from traindoc.events import Checkpoint, SaveFile, StateLoad


def setup(lr: float = 1e-3, sched: bool = True):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s)) if sched else None
    return model, opt, scheduler


def train(model: nn.Module, opt: torch.optim.Optimizer, scheduler: object, steps: int = 3) -> None:
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()  # type: ignore[attr-defined]


def full_state(model, opt, scheduler, step: int) -> dict:  # type: ignore[no-untyped-def]
    return {"model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": scheduler.state_dict(), "step": step}


def ids(doc) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.id for f in doc.findings}


def test_save_events_describe_the_checkpoint_and_the_file(tmp_path: Path) -> None:
    rec, path = tmp_path / "r.jsonl", tmp_path / "ck.pt"
    model, opt, sched = setup()
    with traindoc.watch(announce=False, record=str(rec)):
        train(model, opt, sched)
        torch.save(full_state(model, opt, sched, 3), path)
        torch.save(torch.randn(3), tmp_path / "tensor.pt")  # not a checkpoint
        torch.save(model.state_dict(), io.BytesIO())  # no path: nothing to judge
    events = list(record.read(rec))
    (ck,) = [e for e in events if isinstance(e, Checkpoint)]
    assert ck.training and {"model", "optimizer", "scheduler", "step"} <= set(ck.has)
    assert ck.step == 3 and ck.path == str(path) and "test_live_ckpt.py" in ck.where
    assert ck.lrs == pytest.approx((1e-3 / 4,)) and ck.initial_lrs == (1e-3,)
    (save,) = [e for e in events if isinstance(e, SaveFile)]
    assert save.op == "save" and save.training and not save.existed and save.path == str(path)
    loaded = torch.load(path)  # the file is what torch.save writes
    assert torch.equal(loaded["model"]["0.weight"], model.state_dict()["0.weight"])


@pytest.mark.parametrize("mover", ["os.replace", "os.rename", "shutil.move", "Path.rename", "Path.replace"])
def test_tmp_then_rename_is_atomic(tmp_path: Path, mover: str) -> None:
    model, opt, sched = setup()
    path = tmp_path / "last.pt"
    with traindoc.watch(announce=False) as doc:  # looked up inside: as a script run by traindoc does
        move = {"os.replace": os.replace, "os.rename": os.rename, "shutil.move": shutil.move,
                "Path.rename": lambda a, b: Path(a).rename(b), "Path.replace": lambda a, b: Path(a).replace(b)}[mover]
        for i in range(3):
            train(model, opt, sched, 1)
            torch.save(full_state(model, opt, sched, i), str(path) + ".tmp")
            if mover == "os.rename" and path.exists():
                os.remove(path)
            move(str(path) + ".tmp", str(path))
    assert "checkpoint-not-atomic" not in ids(doc)


@pytest.mark.parametrize("style", ["tempfile", "open"])
def test_a_checkpoint_written_through_a_file_object_is_judged_at_its_final_path(tmp_path: Path, style: str) -> None:
    """torch.save into an open file: a NamedTemporaryFile renamed into place (PyTorch-Ignite's
    DiskSaver), or ``with open(path, "wb")``. Without the optimizer, a resume checkpoint (weights
    and step) is incomplete, named by the path it ends at; the rename keeps it atomic."""
    import tempfile

    model, opt, sched = setup(sched=False)
    path = tmp_path / "checkpoint_3.pt"
    with traindoc.watch(announce=False) as doc:
        train(model, opt, None, 3)
        state = {"model": model.state_dict(), "step": 3}
        if style == "tempfile":
            tmp = tempfile.NamedTemporaryFile(delete=False, dir=tmp_path)
            torch.save(state, tmp.file)
            tmp.close()
            os.replace(tmp.name, path)
        else:
            with open(path, "wb") as f:
                torch.save(state, f)
    f = next(f for f in doc.findings if f.id == "checkpoint-incomplete")
    assert f.evidence["path"] == str(path) and f.evidence["missing"] == ["optimizer"]
    assert "checkpoint-not-atomic" not in ids(doc)
    assert torch.equal(torch.load(path)["model"]["0.weight"], model.state_dict()["0.weight"])


def test_overwriting_the_latest_checkpoint_in_place_fires(tmp_path: Path) -> None:
    model, opt, sched = setup()
    path = tmp_path / "last.pt"
    with traindoc.watch(announce=False) as doc:
        for i in range(3):
            train(model, opt, sched, 2)
            torch.save(full_state(model, opt, sched, i), path)
    f = next(f for f in doc.findings if f.id == "checkpoint-not-atomic")
    assert f.step == 4 and f.evidence["steps"] == [2, 4, 6] and f.evidence["path"] == str(path)
    assert "os.replace" in f.fix and any("test_live_ckpt.py" in w for w in f.where)
    assert "resume reads" in f.cause  # a training checkpoint: the catalog's cause


def test_weights_rewritten_in_place_are_the_model_the_run_keeps(tmp_path: Path) -> None:
    """minGPT's chargpt rewrites model.pt (its state_dict) every 500 iterations: no resume reads
    it, so the cause speaks of the model kept there, not of a resume point."""
    model, opt, sched = setup()
    path = tmp_path / "model.pt"
    with traindoc.watch(announce=False) as doc:
        for _ in range(2):
            train(model, opt, sched, 2)
            torch.save(model.state_dict(), path)
    f = next(f for f in doc.findings if f.id == "checkpoint-not-atomic")
    assert f.evidence["training_checkpoint"] is False
    assert f.cause.startswith(f"{path} holds the model (no optimizer state)") and "resume reads" not in f.cause


def test_new_paths_and_final_weights_stay_quiet_but_an_old_file_overwritten_fires(tmp_path: Path) -> None:
    model, opt, sched = setup()
    (tmp_path / "model.pt").write_bytes(b"from an earlier run")
    with traindoc.watch(announce=False) as doc:
        for i in range(3):
            train(model, opt, sched, 1)
            torch.save(full_state(model, opt, sched, i), tmp_path / f"ckpt_{i}.pt")
        torch.save(model.state_dict(), tmp_path / "model.pt")  # final weights over an old file
        torch.save(model, tmp_path / "whole.pt")  # a pickled module
    assert "checkpoint-not-atomic" not in ids(doc)
    (tmp_path / "last.pt").write_bytes(b"from an earlier run")
    with traindoc.watch(announce=False) as doc:
        train(model, opt, sched, 1)
        torch.save(full_state(model, opt, sched, 1), tmp_path / "last.pt")
    f = next(f for f in doc.findings if f.id == "checkpoint-not-atomic")
    assert f.evidence["overwrote_existing_file"] is True


def test_incomplete_checkpoint_needs_the_scaler_only_when_one_is_used(tmp_path: Path) -> None:
    def run(amp: bool) -> dict[str, object]:
        model, opt, sched = setup()
        scaler = torch.amp.GradScaler("cpu", enabled=amp)
        x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
        with traindoc.watch(announce=False) as doc:
            for _ in range(3):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                sched.step()
            torch.save(full_state(model, opt, sched, 3), tmp_path / f"ck_{amp}.pt")
        return {f.id: f for f in doc.findings}

    assert "checkpoint-incomplete" not in run(amp=False)
    f = run(amp=True)["checkpoint-incomplete"]
    assert f.evidence["missing"] == ["scaler"] and "GradScaler" in f.message  # type: ignore[attr-defined]


def test_load_state_dict_replacing_the_configured_lr_fires(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    model, opt, sched = setup(lr=3e-4)
    train(model, opt, sched)
    torch.save(full_state(model, opt, sched, 3), path)
    rec = tmp_path / "r.jsonl"
    with traindoc.watch(announce=False, record=str(rec)) as doc:
        model, opt, sched = setup(lr=1e-3)  # the config now says 1e-3
        ckpt = torch.load(path)
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        train(model, opt, sched, 1)
    f = next(f for f in doc.findings if f.id == "lr-overridden-by-checkpoint")
    assert f.evidence["configured"] == [1e-3] and f.evidence["loaded"] == [3e-4]
    assert f.evidence["path"] == str(path) and f.evidence["optimizer"] == "AdamW"
    assert "0.001" in f.message and "3.00e-04" in f.message and str(path) in f.message
    loads = [e for e in record.read(rec) if isinstance(e, StateLoad)]
    assert [e.target for e in loads] == ["optimizer", "scheduler"]
    assert loads[1].cls == "LambdaLR" and loads[1].before == (1e-3,) and loads[1].after == (3e-4,)


def test_an_exact_resume_mid_schedule_is_quiet(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    model, opt, sched = setup(lr=1e-3)
    train(model, opt, sched, 5)  # lr is now 1e-3 / 6: the scheduled value
    torch.save(full_state(model, opt, sched, 5), path)
    with traindoc.watch(announce=False) as doc:
        model, opt, sched = setup(lr=1e-3)
        ckpt = torch.load(path, weights_only=True)
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        train(model, opt, sched, 1)
        _, plain, _ = setup(lr=1e-3, sched=False)  # no scheduler, same LR
        plain.load_state_dict(setup(lr=1e-3, sched=False)[1].state_dict())
    assert "lr-overridden-by-checkpoint" not in ids(doc)


def test_a_resume_without_scheduler_compares_the_lr(tmp_path: Path) -> None:
    model, opt, _ = setup(lr=0.1, sched=False)
    state = opt.state_dict()
    with traindoc.watch(announce=False) as doc:
        _, fresh, _ = setup(lr=0.5, sched=False)
        fresh.load_state_dict(state)
    f = next(f for f in doc.findings if f.id == "lr-overridden-by-checkpoint")
    assert f.evidence["what"] == "lr" and f.evidence["path"] == ""


def _checkpoint_entries() -> tuple[object, ...]:
    ser = torch.serialization
    return (torch.save, torch.load, ser._save, ser._load, ser._open_file_like, ser._open_zipfile_writer,
            os.replace, os.rename, torch.optim.Optimizer.load_state_dict,
            torch.optim.lr_scheduler.LambdaLR.load_state_dict)


def test_checkpoint_probes_are_removed_on_exit() -> None:
    before = _checkpoint_entries()
    with traindoc.watch(announce=False):
        during = _checkpoint_entries()
        # torch.save and torch.load stay torch's own; their private steps are observed
        assert during[:2] == before[:2] and during[2] is not before[2] and during[6] is not before[6]
    assert _checkpoint_entries() == before


def test_a_save_probe_error_is_contained_and_loads_are_still_watched(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from traindoc.live.probes import checkpoints

    def broken(obj: object, path: str, step: int) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(checkpoints, "_checkpoint_event", broken)
    model, opt, sched = setup(lr=3e-4)
    with traindoc.watch(announce=False) as doc:
        torch.save(full_state(model, opt, sched, 0), tmp_path / "ck.pt")  # still written
        _, fresh, _ = setup(lr=1e-3)
        fresh.load_state_dict(torch.load(tmp_path / "ck.pt")["optimizer"])
    assert torch.load(tmp_path / "ck.pt")["step"] == 0
    assert ("probe:checkpoint-save", "RuntimeError: boom") in doc.report().disabled
    assert "lr-overridden-by-checkpoint" in ids(doc)
