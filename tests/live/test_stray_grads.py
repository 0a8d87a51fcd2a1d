"""Gradients no optimizer steps, told apart by the data flow, not by how the code is written.

A model that no optimizer holds and whose output's graph reaches no trained parameter (a
DQN's target network, a teacher: their inputs are data) got gradients that train nothing:
target-not-detached, named as the code calls it. A module left out of the optimizer whose
input comes from a trained model (a decoder fed by a trained encoder) is on the trained
parameters' path: it was meant to train, optimizer-param-mismatch. And a model re-created
after its optimizer (the optimizer's own parameters get no gradient) stays a mismatch. A model
whose gradients are handed to the optimizer's parameters by assignment (A3C's local copy, a
bf16 working copy of fp32 master weights) is neither: its gradients are the optimizer's, and
missing-zero-grad judges whether they are cleared."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.findings import Finding


def findings(run: Callable[[], object]) -> dict[str, Finding]:
    with traindoc.watch(announce=False) as doc:
        run()
    return {f.id: f for f in doc.report().findings}


def target_network(detach: bool, steps: int = 20) -> None:
    torch.manual_seed(0)
    online = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    frozen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    frozen.load_state_dict(online.state_dict())
    opt = torch.optim.Adam(online.parameters(), lr=1e-3)
    for _ in range(steps):
        s, s2, r = torch.randn(32, 4), torch.randn(32, 4), torch.randn(32)
        with torch.set_grad_enabled(not detach):
            target = r + 0.9 * frozen(s2).max(1).values
        loss = F.smooth_l1_loss(online(s).max(1).values, target)
        opt.zero_grad()
        loss.backward()
        opt.step()


def keyword_teacher(steps: int = 20) -> None:
    """The teacher called with keyword arguments only (the forward pre-hook sees no input)."""

    class Net(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, 3))

        def forward(self, features: torch.Tensor) -> torch.Tensor:
            return self.body(features)

    class Distiller:
        def __init__(self) -> None:
            torch.manual_seed(1)
            self.student, self.teacher = Net(8), Net(32)
            self.opt = torch.optim.SGD(self.student.parameters(), lr=0.1)

        def step(self, x: torch.Tensor) -> None:
            soft = F.softmax(self.teacher(features=x), -1)
            loss = F.kl_div(F.log_softmax(self.student(features=x), -1), soft, reduction="batchmean")
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()

    d = Distiller()
    for _ in range(steps):
        d.step(torch.randn(16, 8))


def decoder_left_out(steps: int = 20) -> None:
    torch.manual_seed(2)
    encoder, decoder = nn.Linear(8, 4), nn.Linear(4, 8)
    opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)  # the decoder is forgotten
    for _ in range(steps):
        x = torch.randn(32, 8)
        loss = F.mse_loss(decoder(encoder(x)), x)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_a_target_network_with_autograd_on_is_named_as_the_code_calls_it() -> None:
    found = findings(lambda: target_network(detach=False))
    f = found["target-not-detached"]
    assert f.evidence["model"] == "frozen" and f.evidence["class"] == "Sequential"
    assert f.evidence["elements"] == sum(p.numel() for p in nn.Sequential(
        nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)).parameters())
    assert "test_stray_grads.py:" in f.where[0]  # the call site of the target's forward
    assert f.evidence["grad_norm_last"] > f.evidence["grad_norm_first"]  # never cleared: it grows
    assert "optimizer-param-mismatch" not in found


def test_the_same_target_under_no_grad_is_quiet() -> None:
    found = findings(lambda: target_network(detach=True))
    assert "target-not-detached" not in found and "optimizer-param-mismatch" not in found


def test_a_teacher_called_with_keywords_is_judged_by_its_graph() -> None:
    f = findings(keyword_teacher)["target-not-detached"]
    assert f.evidence["model"] == "self.teacher" and f.evidence["class"] == "Net"


def test_a_module_fed_by_a_trained_model_is_a_mismatch() -> None:
    found = findings(decoder_left_out)
    assert "target-not-detached" not in found
    assert found["optimizer-param-mismatch"].evidence["parameters"] == ["weight", "bias"]


def targets_in_a_list(steps: int = 20) -> None:
    torch.manual_seed(3)
    nets = [nn.Linear(4, 2), nn.Linear(4, 2)]  # online, target: no variable holds either
    opt = torch.optim.SGD(nets[0].parameters(), lr=0.01)
    for _ in range(steps):
        loss = F.mse_loss(nets[0](torch.randn(8, 4)), nets[1](torch.randn(8, 4)))
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_a_target_no_variable_holds_is_named_by_its_class() -> None:
    f = findings(targets_in_a_list)["target-not-detached"]
    assert f.evidence["model"] == "Linear" and f.message.startswith("the Linear model (10 elements")
    assert "`model.requires_grad_(False)`" in f.fix


def a3c_worker(steps: int = 30, clear_local: bool = True) -> None:
    """A3C's worker, in one process: a local copy computes the loss, its gradient tensors are
    handed to the shared model's parameters by assignment, the optimizer steps the shared one
    (minimalRL's a3c.py, ikostrikov's ensure_shared_grads)."""
    torch.manual_seed(0)
    shared = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
    local = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
    local.load_state_dict(shared.state_dict())
    opt = torch.optim.Adam(shared.parameters(), lr=1e-3)
    for _ in range(steps):
        x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
        loss = F.cross_entropy(local(x), y)
        opt.zero_grad()
        if clear_local:
            local.zero_grad()
        loss.backward()
        for g, lp in zip(shared.parameters(), local.parameters()):
            g._grad = lp.grad
        opt.step()
        local.load_state_dict(shared.state_dict())


def test_a_local_copy_whose_gradients_the_optimizer_steps_with_is_neither() -> None:
    found = findings(a3c_worker)
    assert "target-not-detached" not in found and "optimizer-param-mismatch" not in found, found
    assert "missing-zero-grad" not in found


def test_a_local_copy_never_cleared_is_missing_zero_grad_in_its_terms() -> None:
    f = findings(lambda: a3c_worker(clear_local=False))["missing-zero-grad"]
    assert f.evidence["handed_over_from"] == "local" and "`local.zero_grad()`" in f.fix
    norms = f.evidence["grad_norm_at_steps"]
    assert norms[-1] > 2 * norms[0]  # the sum of every batch so far


def working_copy(steps: int = 20, clear: bool = True) -> None:
    """Mixed precision by hand, in a module style: the optimizer holds fp32 master weights, a
    half-precision copy computes, its gradients are copied (not shared) into the masters'."""

    class Trainer:
        def __init__(self) -> None:
            torch.manual_seed(4)
            self.master = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
            self.half = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2)).to(torch.bfloat16)
            self.half.load_state_dict(self.master.state_dict())
            self.opt = torch.optim.SGD(self.master.parameters(), lr=0.05, momentum=0.9)

        def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
            if clear:
                for p in self.half.parameters():
                    p.grad = None
            F.cross_entropy(self.half(x.to(torch.bfloat16)).float(), y).backward()
            for m, h in zip(self.master.parameters(), self.half.parameters()):
                m.grad = h.grad.detach().to(torch.float32)
            self.opt.step()
            self.opt.zero_grad(set_to_none=False)
            self.half.load_state_dict(self.master.state_dict())

    t = Trainer()
    for _ in range(steps):
        x = torch.randn(16, 8)
        t.step(x, (x[:, 0] > 0).long())


def test_a_working_copy_whose_gradients_are_copied_is_neither() -> None:
    found = findings(working_copy)
    assert not found, found


def test_a_working_copy_never_cleared_is_missing_zero_grad() -> None:
    f = findings(lambda: working_copy(clear=False))["missing-zero-grad"]
    assert f.evidence["handed_over_from"] == "self.half" and "target-not-detached" not in f.message


def test_a_target_of_the_trained_models_shapes_is_never_a_feeder() -> None:
    """The copy rule needs every model of the step off the optimizer: a DQN's online network ran
    in the step, so its target (same shapes, gradients of its own) is not handed over."""
    from traindoc.live.stray import handed_over

    online, target = nn.Linear(4, 2), nn.Linear(4, 2)
    F.mse_loss(online(torch.randn(8, 4)), target(torch.randn(8, 4))).backward()
    held = {id(p) for p in online.parameters()}
    assert handed_over(list(online.parameters()), [online, target], held) == []
    # Without the online network in the step, the same gradients are a copy's.
    assert handed_over(list(online.parameters()), [target], held) == [(target, list(target.parameters()))]
