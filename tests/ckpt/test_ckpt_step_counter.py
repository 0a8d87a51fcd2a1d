"""A checkpoint's step counter is recognized by what it is, under any name (nanoGPT's
``iter_num``): an integer equal to the optimizer's own step count, or one that grows between two
checkpoints. What is truly missing is still reported, and RNG state alone never fires."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn

import ckpt_fixtures as F
from traindoc import config
from traindoc.analyze import analyze
from traindoc.sources.ckpt import produce, steps

ID = "checkpoint-incomplete"


def finding(events, required: tuple[str, ...] | None = None):  # type: ignore[no-untyped-def]
    settings = config.Settings(detectors={ID: {"required": list(required)}} if required else {})
    report = analyze(events, settings=settings, select=[ID])
    assert not report.disabled, report.disabled
    return next((f for f in report.findings if f.id == ID), None)


def adamw_state(steps: int = 12, **extra: object) -> dict[str, object]:
    torch.manual_seed(0)
    model = F.Net(bn=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    F.train(model, opt, None, steps)
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), **extra}


def test_nanogpts_checkpoint_is_complete(tmp_path: Path) -> None:
    events, summary = produce.inspect(F.nanogpt(tmp_path, iters=12))
    assert summary.step == 12 and "step" in summary.has
    assert any("'iter_num' = 12" in n and "optimizer's own step count" in n for n in summary.notes)
    assert summary.missing == ["scheduler", "scaler", "rng"]  # shown, not judged: no scheduler was used
    assert finding(events) is None


@pytest.mark.parametrize("counter", [12, 11, 13, torch.tensor(12), torch.tensor([12], dtype=torch.int32)])
def test_a_counter_within_one_of_the_optimizer_steps_is_the_step(tmp_path: Path, counter: object) -> None:
    torch.save(adamw_state(12, iters_done=counter), tmp_path / "c.pt")
    assert finding(produce.inspect(tmp_path / "c.pt")[0]) is None


def test_a_counter_in_a_metadata_dict_counts(tmp_path: Path) -> None:
    torch.save(adamw_state(12, meta={"updates": 12, "run": "a"}), tmp_path / "c.pt")
    _, summary = produce.inspect(tmp_path / "c.pt")
    assert summary.step == 12 and any("'meta.updates'" in n for n in summary.notes)


@pytest.mark.parametrize("other", [{"n_layer": 2, "vocab_size": 50304}, {"best_val_loss": 12.0},
                                   {"iters_done": -12}, {"flag": True}])
def test_integers_that_are_no_step_counter_leave_it_missing(tmp_path: Path, other: dict[str, object]) -> None:
    torch.save(adamw_state(12, **other), tmp_path / "c.pt")
    f = finding(produce.inspect(tmp_path / "c.pt")[0])
    assert f is not None and f.evidence["missing"] == ["step"]
    assert "matches the optimizer's own 12 steps" in f.message


def test_a_counter_that_grows_between_two_checkpoints_is_the_step(tmp_path: Path) -> None:
    # SGD without momentum stores no step count: the growth between two saves tells the counter
    torch.manual_seed(0)
    model = F.Net(bn=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    paths = []
    for done in (1005, 1010):
        F.train(model, opt, None, 5)
        paths.append(tmp_path / f"c{done}.pt")
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "n": done}, paths[-1])
    assert finding(produce.inspect(paths[1])[0]) is not None  # alone, nothing says what n is
    events, summary = produce.diff(*paths)
    assert summary.steps == 5 and summary.old.step == 1005 and summary.new.step == 1010
    assert finding(events) is None


def test_rng_state_alone_never_fires_but_can_be_required(tmp_path: Path) -> None:
    model, opt, sched = F.setup()
    F.train(model, opt, sched, 6)
    torch.save(F.training_state(model, opt, sched, 6), tmp_path / "c.pt")  # no RNG state
    events = produce.inspect(tmp_path / "c.pt")[0]
    assert finding(events) is None
    f = finding(events, required=("optimizer", "step", "rng"))
    assert f is not None and f.evidence["missing"] == ["rng"]


def test_what_is_absent_besides_a_missing_part_is_said_precisely(tmp_path: Path) -> None:
    model, opt, sched = F.setup()
    F.train(model, opt, sched, 6)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "c.pt")
    f = finding(produce.inspect(tmp_path / "c.pt")[0])
    assert f is not None and f.evidence["missing"] == ["scheduler", "step"]  # initial_lr: a scheduler was used
    assert f.evidence["also_absent"] == ["scaler", "rng"]
    assert "fp16 GradScaler" in f.message and "bit-exactness" in f.message
    assert "'scheduler': scheduler.state_dict(), 'step': step" in f.fix


def test_counters_read_no_tensor_off_the_cpu() -> None:
    meta = torch.empty((), dtype=torch.int64, device="meta")
    assert steps.counters({"model": {}, "iter_num": 5, "on_meta": meta, "f": 2.0, "b": False}) == {"iter_num": 5}


def test_a_bare_state_dict_with_an_integer_is_not_a_training_checkpoint(tmp_path: Path) -> None:
    torch.save({"model": nn.Linear(2, 2).state_dict(), "iter_num": 0}, tmp_path / "w.pt")
    _, summary = produce.inspect(tmp_path / "w.pt")
    assert not summary.training and "step" not in summary.has


def _weights() -> dict[str, object]:
    torch.manual_seed(0)
    return F.Net(bn=False).state_dict()


@pytest.mark.parametrize("progress", [
    {"trainer": {"epoch_length": 32, "iteration": 128, "max_epochs": 4}},  # PyTorch-Ignite's engine state
    {"loop_state": {"epoch": 3, "step": 480}},  # a hand-written loop's counters, under a key of its own
])
def test_a_loop_progress_dict_under_any_key_is_the_step(tmp_path: Path, progress: dict[str, object]) -> None:
    """Weights with the loop's counters beside them make a training checkpoint: without the
    optimizer it cannot resume (and with it, it is complete)."""
    torch.save({"model": _weights(), **progress}, tmp_path / "c.pt")
    events, summary = produce.inspect(tmp_path / "c.pt")
    assert "step" in summary.has
    f = finding(events)
    assert f is not None and f.evidence["missing"] == ["optimizer"]
    torch.save(adamw_state(12, **progress), tmp_path / "c.pt")
    assert finding(produce.inspect(tmp_path / "c.pt")[0]) is None


@pytest.mark.parametrize("other", [
    {"config": {"epochs": 300, "lr": 0.1, "arch": "resnet"}},  # a config: total epochs, not a counter
    {"sizes": {"width": 64, "depth": 4}},  # integers under no step or epoch key
    {"trainer": {"iteration": True}},
    {"args": {"epochs": 90, "bs": 128}},  # argparse values as a dict: integers alone, the run's length
])
def test_dicts_that_are_no_progress_leave_bare_weights_bare(tmp_path: Path, other: dict[str, object]) -> None:
    assert not steps.is_progress(next(iter(other.values())))
    torch.save({"model": _weights(), **other}, tmp_path / "c.pt")
    _, summary = produce.inspect(tmp_path / "c.pt")
    assert "step" not in summary.has
