"""Resuming live: a load_state_dict counts only when its LRs are what the optimizer steps with;
a checkpoint's step counter is recognized by what it is, and its scheduler state is needed only
when the run steps an LR scheduler."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc import record
from traindoc.events import Checkpoint, StateLoad


def build(lr: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return model, torch.optim.AdamW(model.parameters(), lr=lr)


def step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def get_lr(it: int, peak: float = 1e-3, floor: float = 1e-4, total: int = 100) -> float:
    """nanoGPT's cosine, without warmup."""
    return floor + 0.5 * (1.0 + math.cos(math.pi * min(it, total) / total)) * (peak - floor)


def saved_at(tmp_path: Path, it: int, sched: bool = False) -> Path:
    """A run stopped at iteration ``it`` whose LR was set by get_lr (a scheduler's, with ``sched``)."""
    model, opt = build(1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: get_lr(s) / 1e-3) if sched else None
    for i in range(it):
        if scheduler is None:
            for g in opt.param_groups:
                g["lr"] = get_lr(i)
        step(model, opt)
        if scheduler is not None:
            scheduler.step()
    if scheduler is None:
        for g in opt.param_groups:
            g["lr"] = get_lr(it)  # nanoGPT saves after setting the LR of the iteration it stops at
    path = tmp_path / "ckpt.pt"
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "iter_num": it}
    if scheduler is not None:
        state["scheduler"] = scheduler.state_dict()
    torch.save(state, path)
    return path


def lr_findings(doc) -> list:  # type: ignore[no-untyped-def]
    return [f for f in doc.findings if f.id == "lr-overridden-by-checkpoint"]


def test_a_script_that_sets_its_lr_after_loading_is_quiet(tmp_path: Path) -> None:
    path = saved_at(tmp_path, 60)
    rec = tmp_path / "r.jsonl"
    with traindoc.watch(announce=False, record=str(rec)) as doc:
        model, opt = build(1e-3)  # the configured learning_rate, as nanoGPT builds AdamW
        ckpt = torch.load(path)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])  # the LR of iteration 60 comes back ...
        for it in range(ckpt["iter_num"], 70):
            for g in opt.param_groups:
                g["lr"] = get_lr(it)  # ... and the script sets its own before every step
            step(model, opt)
    assert lr_findings(doc) == []
    assert not [e for e in record.read(rec) if isinstance(e, StateLoad)]  # the load steered nothing


def test_writing_the_very_value_that_was_loaded_still_counts_as_the_scripts(tmp_path: Path) -> None:
    path = saved_at(tmp_path, 60)
    with traindoc.watch(announce=False) as doc:
        model, opt = build(1e-3)
        ckpt = torch.load(path)
        opt.load_state_dict(ckpt["optimizer"])
        assert opt.param_groups[0]["lr"] == get_lr(60)  # the same number the script computes
        for g in opt.param_groups:
            g["lr"] = get_lr(60)
        step(model, opt)
    assert lr_findings(doc) == []


def test_a_loaded_lr_the_optimizer_steps_with_fires(tmp_path: Path) -> None:
    path = saved_at(tmp_path, 60)
    with traindoc.watch(announce=False) as doc:
        model, opt = build(1e-3)
        opt.load_state_dict(torch.load(path)["optimizer"])
        for _ in range(3):
            step(model, opt)  # nothing sets the LR: the checkpoint's 1.63e-04 trains
    (f,) = lr_findings(doc)
    assert f.evidence["configured"] == [1e-3] and f.evidence["loaded"] == [get_lr(60)]
    assert f.evidence["path"].endswith("ckpt.pt") and f.step == 0


def test_the_documented_fix_is_quiet(tmp_path: Path) -> None:
    path = saved_at(tmp_path, 60, sched=True)
    with traindoc.watch(announce=False) as doc:
        model, opt = build(3e-3)  # the LR was raised in the config
        opt.load_state_dict(torch.load(path)["optimizer"])
        for g in opt.param_groups:
            g["lr"] = g["initial_lr"] = 3e-3
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: get_lr(60 + s) / 1e-3)  # built anew
        step(model, opt)
        scheduler.step()
    assert lr_findings(doc) == []


def test_a_scheduler_built_after_the_load_takes_the_checkpoints_base_lr(tmp_path: Path) -> None:
    path = saved_at(tmp_path, 60, sched=True)
    with traindoc.watch(announce=False) as doc:
        model, opt = build(3e-3)
        opt.load_state_dict(torch.load(path)["optimizer"])
        # LambdaLR keeps the loaded initial_lr (1e-3) as its base: the new 3e-3 never trains
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        step(model, opt)
        scheduler.step()
    (f,) = lr_findings(doc)
    assert f.evidence["what"] == "initial_lr" and f.evidence["loaded"] == [1e-3]


def test_a_scheduler_whose_base_is_reset_after_loading_is_quiet(tmp_path: Path) -> None:
    path = saved_at(tmp_path, 60, sched=True)
    with traindoc.watch(announce=False) as doc:
        model, opt = build(3e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        ckpt = torch.load(path)
        opt.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        for g in opt.param_groups:
            g["lr"] = g["initial_lr"] = 3e-3
        scheduler.base_lrs = [3e-3]
        step(model, opt)
        scheduler.step()
    assert lr_findings(doc) == []


# --- checkpoint-incomplete, live -------------------------------------------------------------


def incomplete(doc):  # type: ignore[no-untyped-def]
    return next((f for f in doc.findings if f.id == "checkpoint-incomplete"), None)


def test_a_step_counter_under_the_scripts_own_name_is_recognized(tmp_path: Path) -> None:
    rec = tmp_path / "r.jsonl"
    with traindoc.watch(announce=False, record=str(rec)) as doc:
        model, opt = build(1e-3)
        for iter_num in range(1, 7):
            for g in opt.param_groups:
                g["lr"] = get_lr(iter_num)
            step(model, opt)
            if iter_num % 3 == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iter_num": iter_num,
                            "best_val_loss": 1.0, "config": {"max_iters": 6}}, tmp_path / "ckpt.pt")
    assert incomplete(doc) is None
    cks = [e for e in record.read(rec) if isinstance(e, Checkpoint)]
    assert [("step" in c.has, c.optimizer_steps) for c in cks] == [(True, 3), (True, 6)]


def test_a_counter_that_grows_between_saves_is_a_step_counter(tmp_path: Path) -> None:
    # SGD without momentum keeps no step count, and this process resumed at update 1000
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoc.watch(announce=False) as doc:
        for n_updates in range(1001, 1007):
            step(model, opt)
            if n_updates % 3 == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "n_updates": n_updates},
                           tmp_path / "last.pt")
    assert incomplete(doc) is None


def test_no_counter_at_all_still_fires(tmp_path: Path) -> None:
    with traindoc.watch(announce=False) as doc:
        model, opt = build(1e-3)
        for _ in range(5):
            step(model, opt)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "n_layer": 2}, tmp_path / "c.pt")
    f = incomplete(doc)
    assert f is not None and f.evidence["missing"] == ["step"]
    assert "optimizer's own 5 steps" in f.message and "scaler" not in f.evidence["also_absent"]


def test_initial_lr_without_a_scheduler_needs_no_scheduler_state(tmp_path: Path) -> None:
    with traindoc.watch(announce=False) as doc:
        model, opt = build(1e-3)
        for g in opt.param_groups:
            g["initial_lr"] = g["lr"]  # written by hand, as nanochat does; no scheduler object
        for it in range(4):
            for g in opt.param_groups:
                g["lr"] = g["initial_lr"] * (1 - it / 4)
            step(model, opt)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 4}, tmp_path / "c.pt")
    assert incomplete(doc) is None


def test_a_stepped_scheduler_must_be_saved(tmp_path: Path) -> None:
    with traindoc.watch(announce=False) as doc:
        model, opt = build(1e-3)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, 2)
        for _ in range(4):
            step(model, opt)
            scheduler.step()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 4}, tmp_path / "c.pt")
    f = incomplete(doc)
    assert f is not None and f.evidence["missing"] == ["scheduler"] and "StepLR" in f.message
