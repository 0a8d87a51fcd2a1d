"""An optimizer step handed a closure (LBFGS) is one step, however often it evaluates the
closure: the gradients each evaluation clears belong to the step running it, not to a step the
script dropped. A converged LBFGS, whose step stops moving the parameters by its own test, is
quiet. Two styles: PyTorch's sequence-prediction example (``optimizer.zero_grad()`` in the
closure, fixed iterations) and curve fitting (``model.zero_grad()``, strong-Wolfe line search,
run past convergence); and a script that really drops a backward's gradients, for contrast."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc


def sequence_style(steps: int = 6) -> tuple[int, int]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=5)
    x = torch.randn(64, 3)
    y = torch.sin(x.sum(1, keepdim=True))
    evaluations = 0
    for _ in range(steps):
        def closure() -> torch.Tensor:
            nonlocal evaluations
            evaluations += 1
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)
    return steps, evaluations


def curve_fit_style(steps: int = 12) -> tuple[int, int]:
    """A noise-free linear fit: converged after a few steps, the rest change nothing."""
    torch.manual_seed(1)
    model = nn.Linear(2, 1)
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=20, line_search_fn="strong_wolfe")
    x = torch.linspace(-1, 1, 50).unsqueeze(1).repeat(1, 2) * torch.tensor([1.0, -0.5])
    y = x @ torch.tensor([[2.0], [3.0]]) + 0.5
    evaluations = [0]

    def closure() -> torch.Tensor:
        evaluations[0] += 1
        model.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    return steps, evaluations[0]


def _watched(train: Any) -> tuple[int, int, Any]:
    with traindoc.watch(announce=False) as doc:
        steps, evaluations = train()
    return steps, evaluations, doc


def test_a_closure_step_is_one_step_whatever_its_evaluations() -> None:
    for train in (sequence_style, curve_fit_style):
        steps, evaluations, doc = _watched(train)
        assert evaluations > steps  # the test means something: several evaluations a step
        run = doc.report().run
        assert (run["steps"], run["optimizer_steps"]) == (steps, steps), train.__name__
        assert [f.id for f in doc.findings if f.severity != "info"] == [], train.__name__


def test_a_converged_lbfgs_is_quiet_and_its_optimizer_reevaluates() -> None:
    recorded: list[object] = []
    with traindoc.watch(announce=False) as doc:
        doc.session._sink = recorded.append
        curve_fit_style()
    from traindoc.events import Optimizer, ParamStats

    # First seen, then seen to re-evaluate its closure at its first step.
    assert [e.reevaluates for e in recorded if isinstance(e, Optimizer)] == [False, True]
    # The later steps left every parameter as it was: LBFGS's own stop, not step-no-op.
    still = {e.step for e in recorded if isinstance(e, ParamStats) and e.update == 0.0 and e.optimizer == 0}
    assert still
    assert "step-no-op" not in {f.id for f in doc.findings}


def test_gradients_dropped_by_the_script_still_end_the_round() -> None:
    """Outside a step, clearing the gradients of a backward with no step since means the script
    dropped that backward (here every other batch, the first included): each is a round of its own."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoc.watch(announce=False) as doc:
        for i in range(8):
            opt.zero_grad()
            F.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
            if i % 2 == 1:
                opt.step()
    run = doc.report().run
    assert (run["steps"], run["optimizer_steps"]) == (8, 4)


def test_a_closure_evaluated_once_a_step_is_an_ordinary_step() -> None:
    """Lightning hands every optimizer a closure (training_step and backward) that the step
    evaluates once: the optimizer is judged as any other, so an LR far too small still shows."""
    from traindoc.events import Optimizer

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-7)
    recorded: list[object] = []
    with traindoc.watch(announce=False) as doc:
        doc.session._sink = recorded.append
        for _ in range(40):
            x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))

            def closure() -> torch.Tensor:
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                return loss

            opt.step(closure)
    assert [e.reevaluates for e in recorded if isinstance(e, Optimizer)] == [False]
    assert "tiny-updates" in {f.id for f in doc.findings}


def test_the_op_level_mode_watches_a_closure_steps_first_evaluation_only() -> None:
    """A line search re-evaluates the closure on the same batch at other weights: the op-level
    mode is up for the step's first forward and not for the re-evaluations (each forward under
    the mode costs a Python call per torch call). What the first forward shows is still seen:
    a NaN hidden by ``nan_to_num`` on the way to the loss."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    x, y = torch.randn(64, 3), torch.randn(64, 1)
    stacks: list[list[int]] = []  # the modes on the stack at each forward (after traindoc's hooks)
    model.register_forward_pre_hook(lambda *_: stacks[-1].append(torch._C._len_torch_function_stack()))
    with traindoc.watch(announce=False) as doc:
        for _ in range(5):
            stacks.append([])

            def closure() -> torch.Tensor:
                opt.zero_grad()
                out = torch.nan_to_num(torch.log(model(x)))  # log of a negative output: NaN, hidden
                loss = F.mse_loss(out, y)
                loss.backward()
                return loss

            opt.step(closure)
    assert all(len(s) > 1 for s in stacks)  # the test means something: re-evaluations
    assert [s[0] for s in stacks] == [1] * 5 and all(n == 0 for s in stacks for n in s[1:]), stacks
    assert "masked-nonfinite" in {f.id for f in doc.findings}
