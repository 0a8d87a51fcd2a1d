"""The live face from code: watch(), observer-only, fail-open, clean uninstall."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torch.nn as nn

import traindoc
from traindoc.live import session as session_mod
from traindoc.live.levels import LEVELS


def train(steps: int = 30, *, bf16: bool = False) -> tuple[nn.Module, list[float]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    if bf16:
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3 if not bf16 else 1e-5)
    data = torch.utils.data.TensorDataset(torch.randn(128, 6), torch.randint(0, 3, (128,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True)
    losses, step = [], 0
    while step < steps:
        for x, y in loader:
            x = x.to(next(model.parameters()).dtype)
            loss = nn.functional.cross_entropy(model(x).float(), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            step += 1
            if step == steps:
                break
    return model, losses


def rng_states() -> tuple[torch.Tensor, object, object]:
    return torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].tolist()


def test_watch_leaves_training_bit_identical_and_rngs_untouched() -> None:
    bare, bare_losses = train()
    bare_rng = rng_states()
    with traindoc.watch(announce=False) as doc:
        watched, watched_losses = train()
    watched_rng = rng_states()
    assert bare_losses == watched_losses
    for a, b in zip(bare.state_dict().values(), watched.state_dict().values()):
        assert torch.equal(a, b)
    assert torch.equal(bare_rng[0], watched_rng[0]) and bare_rng[1:] == watched_rng[1:]
    assert doc.report().run["steps"] == 30
    assert [f.id for f in doc.findings if f.severity != "info"] == []


def test_watch_finds_bf16_underflow_from_code() -> None:
    with traindoc.watch(announce=False) as doc:
        train(steps=20, bf16=True)
    ids = {f.id for f in doc.findings}
    assert {"update-underflow", "bf16-master-weights"} <= ids
    bf16 = next(f for f in doc.findings if f.id == "bf16-master-weights")
    assert any("test_live.py" in w for w in bf16.where), bf16.where  # the user's file:line


def test_probes_are_removed_on_exit() -> None:
    originals = (torch.Tensor.backward, torch.autograd.backward, torch.nn.utils.clip_grad_norm_,
                 nn.functional.cross_entropy, nn.Module.to, torch.optim.Optimizer.__init__)
    engine = torch.autograd._engine_run_backward
    with traindoc.watch(announce=False):
        # nothing the user sees is swapped: the start of a backward is seen at torch's private
        # entry into the engine, which both Tensor.backward and torch.autograd.backward call
        assert torch.autograd._engine_run_backward is not engine
        assert (torch.Tensor.backward, torch.autograd.backward, torch.nn.utils.clip_grad_norm_,
                nn.functional.cross_entropy) == originals[:4]
    assert torch.autograd._engine_run_backward is engine
    assert (torch.Tensor.backward, torch.autograd.backward, torch.nn.utils.clip_grad_norm_,
            nn.functional.cross_entropy, nn.Module.to, torch.optim.Optimizer.__init__) == originals


def test_a_failing_probe_is_disabled_and_reported_once(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    calls = []

    def broken(self: object, loss: object) -> None:
        calls.append(1)
        raise RuntimeError("boom")

    monkeypatch.setattr(session_mod.Session, "on_backward", broken)
    with traindoc.watch(announce=False) as doc:
        _, losses = train(steps=10)
    assert len(losses) == 10  # the user's training went on
    assert len(calls) == 1  # disabled after the first failure
    errors = dict(doc.report().disabled)
    assert errors["probe:backward"].startswith("RuntimeError: boom; blind from step 0 on: ")
    assert "constant-loss" in errors["probe:backward"]  # the detectors it left blind are named
    assert capsys.readouterr().err.count("internal error in probe 'backward'") == 1


def test_watch_names_explicit_model_and_optimizer() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model[2].weight.requires_grad_(True)
    head = nn.Linear(8, 2)  # built, handed to the optimizer, never used
    opt = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=0.1)
    with traindoc.watch(model, opt, announce=False) as doc:
        for _ in range(8):
            loss = model(torch.randn(16, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    (f,) = [f for f in doc.findings if f.id == "no-gradient"]
    assert f.step == 0 and len(f.where) == 2


def test_level_is_validated() -> None:
    with pytest.raises(ValueError, match="level must be one of"):
        traindoc.watch(level="max")


def test_sampling_schedule() -> None:
    lv = LEVELS["standard"]
    assert all(lv.sampled(s) for s in range(lv.dense))
    assert not lv.sampled(lv.dense + 1) and lv.sampled(lv.every * 10)
    # A long run's later steps are sampled half as often: every 25th step before step 1000,
    # every 50th from there on.
    assert [s for s in range(lv.dense, 1000) if lv.sampled(s)] == list(range(25, 1000, 25))
    assert [s for s in range(1000, 1200) if lv.sampled(s)] == [1000, 1050, 1100, 1150]
    assert [s for s in range(64, 200) if LEVELS["thorough"].sampled(s)] == list(range(64, 200))
