"""Issue 28, on hand-made events and tiny graphs: the root named, not the symptom.

Each judgement is checked both ways (fires / stays quiet) without running a script; the zoo
cases run the same spellings end to end (tests/test_zoo.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from traindoc.detectors.bad_initial_loss import BadInitialLoss
from traindoc.detectors.constant_loss import ConstantLoss
from traindoc.detectors.degenerate_threshold import DegenerateThreshold
from traindoc.detectors.eval_in_train_mode import EvalInTrainMode
from traindoc.detectors.inference_tensor_in_autograd import InferenceTensorInAutograd
from traindoc.detectors.no_gradient import NoGradient
from traindoc.events import (
    Backward, Classification, EvalPass, GradAccumulation, InferenceForward, Optimizer, ParamStats, Scalar,
)
from traindoc.live import measure
from traindoc.live.probes.printed import parse_line


def _row(step: int, name: str, opt: int = 0, grad: float | None = 1.0) -> ParamStats:
    return ParamStats(step=step, name=name, dtype="torch.float32", numel=10, requires_grad=True, norm=1.0,
                      grad=grad, has_grad=grad is not None, optimizer=opt)


def _accum(step: int, norm: float, opt: int = 0) -> GradAccumulation:
    return GradAccumulation(step=step, optimizer=opt, cls="Adam", lr=1e-3, backwards=1, batches=1, scale=1.0,
                            norms=(norm,), carried=0.0, cleared=True)


def _run(det: object, events: list[object]) -> list[object]:
    out = []
    for e in events:
        out.extend(det.observe(e))  # type: ignore[attr-defined]
    out.extend(det.finish())  # type: ignore[attr-defined]
    return out


# ---- no-gradient: a GAN generator whose own loss never reaches it ---------------------------------
def _gan(generator_grad: float | None) -> list[object]:
    events: list[object] = [Optimizer(step=0, index=0, cls="Adam", groups=1), Optimizer(step=0, index=1, cls="Adam", groups=1)]
    for it in range(6):  # D steps on even steps (optimizer 1), G on odd ones (optimizer 0)
        events += [_row(2 * it, "d.weight", opt=1), _row(2 * it + 1, "g.weight", opt=0, grad=generator_grad)]
    return events


def test_no_gradient_names_the_generator_that_never_gets_one() -> None:
    found = _run(NoGradient(), _gan(generator_grad=None))
    assert found and found[0].id == "no-gradient" and found[0].step == 1
    assert found[0].evidence["parameters"] == ["g.weight"]


def test_no_gradient_quiet_when_the_generator_trains() -> None:
    assert _run(NoGradient(), _gan(generator_grad=0.5)) == []


def test_no_gradient_leaves_a_single_dry_optimizer_to_constant_loss() -> None:
    events = [_row(s, "w", grad=None) for s in range(8)]
    assert _run(NoGradient(), events) == []


def _critic(bias: float | None, weight: float = 0.3) -> list[object]:
    return [_row(s, n, grad=g) for s in range(6)
            for n, g in (("body.weight", 0.5), ("head.weight", weight), ("head.bias", bias))]


def test_no_gradient_quiet_for_a_bias_whose_gradient_cancels() -> None:
    """A WGAN critic's output bias: a gradient of exact zeros while its layer's weight learns."""
    assert _run(NoGradient(), _critic(bias=0.0)) == []


def test_no_gradient_fires_for_a_bias_the_forward_never_adds() -> None:
    """A hand-written layer computing ``x @ self.weight.T`` without its bias: None, not zeros."""
    found = _run(NoGradient(), _critic(bias=None))
    assert found and found[-1].evidence["parameters"] == ["head.bias"]


def test_no_gradient_fires_for_a_head_whose_every_gradient_is_zero() -> None:
    """A head whose loss term is multiplied by 0: zeros in its every parameter, not a cancellation."""
    found = _run(NoGradient(), _critic(bias=0.0, weight=0.0))
    assert found and sorted(found[-1].evidence["parameters"]) == ["head.bias", "head.weight"]


# ---- constant-loss: a loss whose graph reaches no parameter --------------------------------------
def _leaf_loss(has_grad: bool, norm: float) -> list[object]:
    events: list[object] = []
    for s in range(7):
        events += [Backward(step=s, value=0.8, constant=False), _accum(s, norm), _row(s, "w", grad=0.3 if has_grad else None)]
    return events


def test_constant_loss_fires_when_backward_reaches_no_parameter() -> None:
    found = _run(ConstantLoss(), _leaf_loss(has_grad=False, norm=0.0))
    assert [f.step for f in found][:1] == [0]
    assert found[0].evidence["unreached_steps"] >= 5


def test_constant_loss_quiet_when_gradients_are_cleared_before_step() -> None:
    # zero_grad() between backward() and step(): the norm after backward is positive
    assert _run(ConstantLoss(), _leaf_loss(has_grad=False, norm=2.0)) == []


def test_constant_loss_quiet_on_sparse_gradients_the_norms_skip() -> None:
    # SparseAdam alone: the post-backward norms leave sparse gradients out (0), ParamStats sees them
    assert _run(ConstantLoss(), _leaf_loss(has_grad=True, norm=0.0)) == []


# ---- inference-tensor-in-autograd ----------------------------------------------------------------
def _inference(adapter_grad: float | None) -> list[object]:
    events: list[object] = []
    for s in range(4):
        events += [InferenceForward(step=s, params=("adapter.weight",), modules=("adapter (Linear)",), where="t.py:9"),
                   _row(s, "adapter.weight", grad=adapter_grad), _row(s, "head.weight")]
    return events


def test_inference_mode_root_is_named_with_its_call_site() -> None:
    found = _run(InferenceTensorInAutograd(), _inference(adapter_grad=None))
    assert found and found[0].step == 0 and found[0].where == ("t.py:9",)


def test_inference_mode_quiet_when_the_module_also_runs_with_gradients() -> None:
    assert _run(InferenceTensorInAutograd(), _inference(adapter_grad=0.2)) == []


# ---- eval-in-train-mode: functional dropout ------------------------------------------------------
def _eval(first_diff: str, training: bool = True) -> EvalPass:
    return EvalPass(step=9, model="Net", role="model", duration_s=0.1, elapsed_s=1.0, training=training,
                    rerun_abs=0.4 if first_diff else 0.0, first_diff=first_diff)


def test_eval_in_train_mode_sees_functional_dropout() -> None:
    found = _run(EvalInTrainMode(), [_eval("fc2 (Linear)")])
    assert found and found[0].step == 9 and "self.training" in found[0].message


def test_eval_in_train_mode_quiet_when_eval_mode_changes_nothing() -> None:
    assert _run(EvalInTrainMode(), [_eval(""), _eval("fc2 (Linear)", training=False)]) == []


# ---- degenerate-threshold: an F1 printed for the test split --------------------------------------
def test_degenerate_threshold_judges_a_printed_test_f1() -> None:
    events: list[object] = []
    for i in range(6):
        events += [Scalar(step=10 * i + k, name="loss", value=0.7 - 0.1 * i) for k in range(3)]
        events.append(Scalar(step=10 * i + 9, name="metric.test_f1", value=0.0))
    found = _run(DegenerateThreshold(), events)
    assert found and found[-1].evidence["signals"] == ["metric.test_f1"]


def test_printed_f1_at_a_threshold_reads_as_f1() -> None:
    assert parse_line("ep 7 | val F1@0.9: 0.0000") == {"ep": 7.0, "val_f1": 0.0}
    assert parse_line("Val F1 (macro): 0.000") == {}  # not "F" = 1
    assert parse_line("Test set: Average loss: 0.2, F1: 0.0")["test_f1"] == 0.0


# ---- bad-initial-loss: a learnable logit scale ---------------------------------------------------
def test_learnable_scale_is_found_through_exp_and_division() -> None:
    scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
    tau = nn.Parameter(torch.tensor(0.05))
    a = F.normalize(torch.randn(8, 4, requires_grad=True), dim=-1)
    b = F.normalize(torch.randn(8, 4), dim=-1)
    s = measure.learnable_scale(scale.exp() * a @ b.T)
    assert s is not None and abs(float(s) - 1 / 0.07) < 1e-3
    t = measure.learnable_scale((a @ b.T / tau.clamp(min=0.01)).T)
    assert t is not None and abs(float(t) - 20.0) < 1e-3
    assert measure.learnable_scale(a @ b.T / 0.07) is None  # a constant temperature is no parameter
    assert measure.learnable_scale(nn.Linear(4, 3)(nn.PReLU()(a))) is None  # a one-element weight elsewhere


def test_bad_initial_loss_allows_what_the_scale_explains() -> None:
    assert list(BadInitialLoss().observe(Classification(step=0, classes=64, value=8.1, scale=14.3))) == []
    assert list(BadInitialLoss().observe(Classification(step=0, classes=64, value=8.1))) != []
    found = list(BadInitialLoss().observe(Classification(step=0, classes=64, value=60.0, scale=14.3)))
    assert found and "not normalised" in found[0].message


def test_sparse_gradients_are_measured() -> None:
    emb = nn.Embedding(10, 4, sparse=True)
    emb(torch.tensor([1, 2, 2])).sum().backward()
    g = emb.weight.grad
    assert g is not None and g.is_sparse
    assert abs(float(measure.norm(g)) - float(g.to_dense().norm())) < 1e-5
    assert measure.StepSnapshot(emb.weight, emb.weight.grad).grad_nonzero is None
