"""single-class-softmax: the graph walk that finds a softmax over one class on the loss's side
(cross_entropy on one output, a one-channel map, softmax before a BCE), what it must not find
(classes, attention over one key inside the model), the detector on hand-made events, the
detectors it takes the case from, and a Hugging Face model configured with one label."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.detectors.constant_loss import ConstantLoss
from traindoc.detectors.saturated_outputs import SaturatedOutputs
from traindoc.detectors.single_class_softmax import SingleClassSoftmax
from traindoc.events import Activation, Backward, ParamStats, Scalar, SingleClass
from traindoc.live.loss_side import singleton_softmax


@pytest.fixture
def x() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(8, 20)


def test_cross_entropy_on_one_output_with_float_targets(x: torch.Tensor) -> None:
    head = nn.Linear(20, 1)
    found = singleton_softmax(F.cross_entropy(head(x), torch.rand(8, 1)).grad_fn)
    assert found is not None
    assert (found.op, found.shape, found.dim, found.taken_by, found.targets) == (
        "log_softmax", (8, 1), 1, "mul", "floats")
    assert found.weight is head.weight and found.alone


def test_cross_entropy_on_one_output_with_class_indices_and_label_smoothing(x: torch.Tensor) -> None:
    head = nn.Linear(20, 1)
    for kwargs in ({}, {"label_smoothing": 0.1}):
        found = singleton_softmax(F.cross_entropy(head(x), torch.zeros(8, dtype=torch.long), **kwargs).grad_fn)
        assert found is not None and found.op == "log_softmax" and found.weight is head.weight
    plain = singleton_softmax(F.nll_loss(F.log_softmax(head(x), dim=-1), torch.zeros(8, dtype=torch.long)).grad_fn)
    assert plain is not None and (plain.dim, plain.taken_by, plain.targets) == (1, "nll_loss", "class indices")


def test_softmax_of_one_unit_before_a_bce_through_a_squeeze(x: torch.Tensor) -> None:
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 1), nn.Softmax(dim=1))
    found = singleton_softmax(nn.BCELoss()(model(x).squeeze(1), torch.rand(8)).grad_fn)
    assert found is not None
    assert (found.op, found.taken_by, found.targets) == ("softmax", "binary_cross_entropy", "floats")
    assert found.weight is model[2].weight


def test_a_one_channel_segmentation_map_beside_a_dice_term_is_not_alone() -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 1, 3, padding=1)
    logits = conv(torch.randn(2, 3, 8, 8))
    mask = (torch.rand(2, 1, 8, 8) > 0.5).float()
    dice = 1 - (2 * (torch.sigmoid(logits) * mask).sum() + 1) / (torch.sigmoid(logits).sum() + mask.sum() + 1)
    found = singleton_softmax((nn.CrossEntropyLoss()(logits, mask) + dice).grad_fn)
    assert found is not None and found.shape == (2, 1, 8, 8) and found.weight is conv.weight
    assert not found.alone


def test_classes_and_a_softmax_inside_the_model_are_not_found(x: torch.Tensor) -> None:
    assert singleton_softmax(F.cross_entropy(nn.Linear(20, 2)(x), torch.zeros(8, dtype=torch.long)).grad_fn) is None
    assert singleton_softmax(F.binary_cross_entropy_with_logits(nn.Linear(20, 1)(x), torch.rand(8, 1)).grad_fn) is None
    # attention of every row over one key, then a head over 3 classes: the walk stops at the head
    q, head = nn.Linear(20, 20), nn.Linear(20, 3)
    weights = torch.softmax(q(x)[:, None, :] @ x[:, :, None], dim=-1)  # [8, 1, 1]
    pooled = (weights * x[:, None, :]).sum(1)
    assert singleton_softmax(F.cross_entropy(head(pooled), torch.zeros(8, dtype=torch.long)).grad_fn) is None
    assert singleton_softmax(F.mse_loss(head(pooled), torch.zeros(8, 3)).grad_fn) is None


def _event(step: int, alone: bool = True, op: str = "log_softmax", taken_by: str = "mul") -> SingleClass:
    return SingleClass(step=step, op=op, shape="[32, 1]", dim=1, taken_by=taken_by, targets="floats",
                       layer="fc.weight [1, 20]", alone=alone, where="train.py:26")


def _judge(events: list) -> list:
    det = SingleClassSoftmax()
    found = [f for e in events for f in det.observe(e) or ()]
    return found + list(det.finish())


def test_fires_on_the_third_sampled_step_and_quotes_the_losses() -> None:
    events: list = []
    for step in range(5):
        events += [_event(step), Scalar(step=step, name="loss", value=-0.0)]
    found = _judge(events)
    assert [f.step for f in found] == [0, 0]  # on confirm, then again at the end with every step
    first, last = found
    assert first.evidence["steps"] == 3 and last.evidence["steps"] == 5
    assert "The loss was -0 on those steps" in last.message or "The loss was 0 on those steps" in last.message
    assert "`fc.weight [1, 20]`" in last.message and last.where == ("train.py:26", "fc.weight")
    assert "F.mse_loss" in last.fix  # float targets: a regression, or a BCE on one logit


def test_a_softmax_before_a_bce_gets_the_sigmoid_fix_and_a_term_beside_others_says_so() -> None:
    events: list = []
    for step in range(3):
        events += [_event(step, alone=False, op="softmax", taken_by="binary_cross_entropy"),
                   Scalar(step=step, name="loss", value=50.0 + step)]
    (f, _) = _judge(events)
    assert "sigmoid" in f.fix and "other terms still reach the model" in f.message
    assert "moved between" not in f.message


def test_quiet_below_confirm_and_once_per_step() -> None:
    assert _judge([_event(0), _event(0), _event(1)]) == []


def test_constant_loss_leaves_a_single_class_step_to_it() -> None:
    """Zero gradients on a step whose loss is over one class are single-class-softmax's; the
    same zero gradients with no SingleClass event stay constant-loss's."""

    def zero_grad_run(with_event: bool) -> list:
        det = ConstantLoss()
        found: list = []
        for step in range(4):
            events: list = [Backward(step=step, value=-0.0, constant=False, where="train.py:26")]
            if with_event:
                events.append(_event(step))
            events.append(ParamStats(step=step, name="fc.weight", dtype="torch.float32", numel=20,
                                     requires_grad=True, norm=1.0, grad=0.0, has_grad=True, optimizer=0))
            for e in events:
                found += det.observe(e) or ()
        return found + list(det.finish())

    assert zero_grad_run(with_event=False)
    assert zero_grad_run(with_event=True) == []


def test_saturated_outputs_leaves_a_softmax_pinned_at_one_to_it() -> None:
    def pinned_run(with_event: bool) -> list:
        det = SaturatedOutputs()
        found: list = []
        events: list = [_event(0, op="softmax")] if with_event else []
        events += [Activation(step=s, module="Sequential", type="output", is_output=True, spread=0.0,
                              lo=1.0, hi=1.0) for s in range(30)]
        for e in events:
            found += det.observe(e) or ()
        return found + list(det.finish())

    assert pinned_run(with_event=False)
    assert pinned_run(with_event=True) == []


def _train(model: nn.Module, loss_of, steps: int = 20):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with traindoc.watch(announce=False) as doc:
        for _ in range(steps):
            loss = loss_of(model)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return doc


def test_live_a_transformers_model_with_one_label_and_a_cross_entropy_of_its_own_fires() -> None:
    """A Hugging Face BERT with ``num_labels=1``: transformers computes an MSE on the one logit
    when given labels (a regression), quiet. A script that computes its own
    ``nn.CrossEntropyLoss()`` on ``outputs.logits`` (as a Trainer's ``compute_loss`` override
    does) takes a cross-entropy over one class, which fires with the classifier's own name.
    transformers refuses ``problem_type="single_label_classification"`` with one label for this
    very reason; a loss written by the user gets no such check."""
    transformers = pytest.importorskip("transformers")

    def bert() -> nn.Module:
        torch.manual_seed(0)
        config = transformers.BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, intermediate_size=64, num_labels=1)
        return transformers.BertForSequenceClassification(config)

    ids = torch.randint(0, 200, (8, 10))

    def regression(model: nn.Module) -> torch.Tensor:
        return model(input_ids=ids, labels=torch.rand(8)).loss

    def own_cross_entropy(model: nn.Module) -> torch.Tensor:
        outputs = model(input_ids=ids)
        return nn.CrossEntropyLoss()(outputs.logits, torch.zeros(8, dtype=torch.long))

    quiet = _train(bert(), regression)
    assert "single-class-softmax" not in [f.id for f in quiet.findings]
    fired = [f for f in _train(bert(), own_cross_entropy).findings if f.id == "single-class-softmax"]
    assert fired and fired[0].evidence["layer"] == "classifier.weight [1, 32]"
    assert fired[0].evidence["targets"] == "class indices" and fired[0].evidence["loss_max"] == 0.0
