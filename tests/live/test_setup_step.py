"""A step taken before any gradient was computed, on zero gradients, is a framework allocating
its optimizer's state (``deepspeed.initialize`` does it; see tests/integrations/test_deepspeed.py
for the real one), not training: it is not counted and measures nothing. A step whose gradients
were written without ``backward()`` (``torch.autograd.grad``, as meta-learning code does) is
training, and an LBFGS step computes its gradients in its closure."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc


def _data() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)), torch.randn(64, 8), torch.randint(0, 3, (64,))


def test_a_state_allocating_step_on_zero_gradients_is_not_a_training_step() -> None:
    model, x, y = _data()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with traindoc.watch(announce=False) as doc:
        for p in model.parameters():  # as DeepSpeed's optimizers do inside deepspeed.initialize
            p.grad = torch.zeros_like(p)
        opt.step()
        for _ in range(20):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = doc.report()
    assert report.run["optimizer_steps"] == 20
    assert [f.id for f in report.findings if f.severity != "info"] == []


def test_gradients_written_without_backward_are_training() -> None:
    model, x, y = _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    with traindoc.watch(announce=False) as doc:
        for _ in range(20):
            grads = torch.autograd.grad(F.cross_entropy(model(x), y), params)
            for p, g in zip(params, grads):
                p.grad = g
            opt.step()
    assert doc.report().run["optimizer_steps"] == 20


def test_an_lbfgs_first_step_is_training() -> None:
    model, x, y = _data()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    with traindoc.watch(announce=False) as doc:
        for _ in range(5):
            opt.step(closure)
    assert doc.report().run["optimizer_steps"] == 5
