"""The loop, evaluation and data probes never hurt the run: a probe that raises is disabled and
reported once, and every patched function is put back on exit."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data import dataloader as _dl

import traindoc
from traindoc.live.probes.data import DataProbes
from traindoc.live.probes.eval import EvalProbes
from traindoc.live.probes.accumulation import AccumulationProbe
from traindoc.live.probes.loop import LoopProbes


def train(steps: int = 12) -> tuple[nn.Module, list[float]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4)
    data = TensorDataset(torch.randn(96, 8), torch.randint(0, 3, (96,)))
    losses, step = [], 0
    while step < steps:
        for x, y in DataLoader(data, batch_size=16, shuffle=True):
            loss = F.cross_entropy(model(x), y)
            (loss / 2).backward()
            if step % 2:
                opt.step()
                opt.zero_grad()
                sched.step()
            model.eval()
            with torch.no_grad():
                losses.append(float(model(x).sum()) + loss.item())
            model.train()
            step += 1
            if step == steps:
                break
    return model, losses


@pytest.mark.parametrize("cls,method,probe", [
    (AccumulationProbe, "_pre_backward", "accumulation"),
    (AccumulationProbe, "install", "accumulation"),  # a torch it does not know (2.14's Function.apply was)
    (AccumulationProbe, "uninstall", "accumulation"),
    (LoopProbes, "_before_sched", "scheduler"),
    (EvalProbes, "_look", "eval"),
    (EvalProbes, "_enter", "eval"),
    (DataProbes, "_note_loader", "data"),
])
def test_a_raising_probe_is_disabled_and_training_is_unchanged(
        monkeypatch: pytest.MonkeyPatch, cls: type, method: str, probe: str) -> None:
    bare, bare_losses = train()

    def broken(self: object, *args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(cls, method, broken)
    with traindoc.watch(announce=False) as doc:
        watched, watched_losses = train()
    assert watched_losses == bare_losses
    for a, b in zip(bare.state_dict().values(), watched.state_dict().values()):
        assert torch.equal(a, b)
    assert dict(doc.report().disabled)[f"probe:{probe}"].startswith("RuntimeError: boom")


def test_patched_functions_are_restored() -> None:
    def current() -> tuple[object, ...]:
        return (torch.no_grad.__enter__, torch.no_grad.__exit__, torch.inference_mode.__enter__,
                torch.inference_mode.__exit__, lr_scheduler.LRScheduler._update_lr,
                torch.amp.GradScaler.step, torch.amp.GradScaler.scale, _dl._BaseDataLoaderIter.__next__,
                torch.Tensor.backward, torch.autograd.backward)

    before = current()
    with traindoc.watch(announce=False):
        assert current() != before
        train(4)
    assert current() == before
    from torch.nn.modules import module as m
    assert not m._global_forward_hooks and not m._global_forward_pre_hooks


def test_training_with_all_probes_is_bit_identical() -> None:
    bare, bare_losses = train(20)
    with traindoc.watch(announce=False) as doc:
        watched, watched_losses = train(20)
    assert watched_losses == bare_losses
    for a, b in zip(bare.state_dict().values(), watched.state_dict().values()):
        assert torch.equal(a, b)
    assert doc.report().disabled == []
