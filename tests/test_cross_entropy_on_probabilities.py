"""cross-entropy-on-probabilities: the graph walk that finds a softmax's output under a
cross_entropy's log_softmax or an nll_loss (a softmax layer, a softmax in the loop, a mixture of
softmax experts, a sequence model, a segmentation map), what it must leave alone (logits, a log
in between, soft targets, attention inside the model, a softmax over one class), the detector
on hand-made events, and a Hugging Face classifier whose logits the user turns into
probabilities."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from traindoc.detectors.cross_entropy_on_probabilities import CrossEntropyOnProbabilities, floor_of
from traindoc.events import LossOnProbabilities, Scalar
from traindoc.live.loss_side import probabilities_loss


@pytest.fixture
def x() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(8, 20)


Y = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])


def test_a_softmax_layer_or_call_before_cross_entropy(x: torch.Tensor) -> None:
    head = nn.Linear(20, 5)
    for loss in (nn.CrossEntropyLoss()(nn.Sequential(head, nn.Softmax(dim=1))(x), Y),
                 F.cross_entropy(torch.softmax(head(x), dim=-1), Y, label_smoothing=0.1)):
        found = probabilities_loss(loss.grad_fn)
        assert found is not None
        assert (found.loss, found.classes, found.shape, found.dim) == ("cross_entropy", 5, (8, 5), 1)
        assert found.weight is head.weight


def test_nll_loss_of_probabilities(x: torch.Tensor) -> None:
    head = nn.Linear(20, 5)
    found = probabilities_loss(F.nll_loss(F.softmax(head(x), dim=1), Y).grad_fn)
    assert found is not None and found.loss == "nll_loss" and found.weight is head.weight


def test_a_mixture_of_softmax_experts_and_a_sequence_model_and_a_segmentation_map(x: torch.Tensor) -> None:
    experts = [nn.Linear(20, 5) for _ in range(3)]
    gates = F.softmax(nn.Linear(20, 3)(x), dim=1)
    mixture = sum(gates[:, i:i + 1] * F.softmax(e(x), dim=1) for i, e in enumerate(experts))
    found = probabilities_loss(F.cross_entropy(mixture, Y).grad_fn)
    assert found is not None and found.classes == 5
    lm = nn.Linear(20, 11)
    h = torch.randn(2, 4, 20)
    probs = F.softmax(lm(h), dim=-1)
    found = probabilities_loss(F.cross_entropy(probs.view(-1, 11), torch.randint(0, 11, (8,))).grad_fn)
    assert found is not None and (found.classes, found.dim) == (11, 2)
    conv = nn.Conv2d(3, 4, 1)
    found = probabilities_loss(F.cross_entropy(F.softmax(conv(torch.randn(2, 3, 5, 5)), dim=1),
                                               torch.randint(0, 4, (2, 5, 5))).grad_fn)
    assert found is not None and (found.classes, found.shape) == (4, (2, 4, 5, 5)) and found.weight is conv.weight


def test_what_is_right_is_left_alone(x: torch.Tensor) -> None:
    head, teacher = nn.Linear(20, 5), nn.Linear(20, 5)
    right = [
        F.cross_entropy(head(x), Y),
        F.nll_loss(F.log_softmax(head(x), dim=1), Y),
        F.nll_loss(torch.log(F.softmax(head(x), dim=1)), Y),  # the log is there
        F.cross_entropy(head(x), F.softmax(teacher(x) / 2, dim=1)),  # soft targets: a target
        F.cross_entropy(head(x), F.softmax(teacher(x), dim=1).detach()) + F.cross_entropy(head(x), Y),
        F.kl_div(F.log_softmax(head(x), dim=1), F.softmax(teacher(x), dim=1), reduction="batchmean"),
    ]
    h = torch.randn(2, 4, 20)
    attended = F.softmax(h @ h.transpose(1, 2), dim=-1) @ h  # attention inside the model
    right.append(F.cross_entropy(nn.Linear(20, 7)(attended).view(-1, 7), torch.randint(0, 7, (8,))))
    experts = [nn.Linear(20, 5) for _ in range(2)]
    mixture = 0.5 * F.softmax(experts[0](x), dim=1) + 0.5 * F.softmax(experts[1](x), dim=1)
    right.append(F.nll_loss(torch.log(mixture.clamp_min(1e-9)), Y))
    for loss in right:
        assert probabilities_loss(loss.grad_fn) is None
    one = nn.Linear(20, 1)  # one class: single-class-softmax's
    assert probabilities_loss(F.cross_entropy(F.softmax(one(x), dim=1), torch.zeros(8, dtype=torch.long)).grad_fn) is None


def test_floor() -> None:
    assert floor_of(10) == pytest.approx(math.log(1 + 9 / math.e)) == pytest.approx(1.4612, abs=1e-4)
    p = F.one_hot(torch.tensor([3]), 10).float()  # the best a probability vector can do
    assert F.cross_entropy(p, torch.tensor([3])).item() == pytest.approx(floor_of(10), abs=1e-6)


def test_the_detector_confirms_on_three_sampled_steps_and_quotes_the_floor() -> None:
    det = CrossEntropyOnProbabilities()
    ev = dict(loss="cross_entropy", classes=10, shape="[64, 10]", dim=1, layer="2.weight [10, 64]", where="t.py:9")
    out = []
    for step in (0, 1, 2):
        out += list(det.observe(LossOnProbabilities(step=step, **ev)))
        assert (step < 2) == (not out)
        out += list(det.observe(Scalar(step=step, name="loss", value=2.3 - 0.1 * step)))
    for step in range(3, 40):
        out += list(det.observe(Scalar(step=step, name="loss", value=1.47)))
    (f,) = list(det.finish())
    assert f.step == 0 and f.severity == "warning" and list(f.where) == ["t.py:9", "2.weight"]
    assert "ln(1 + 9/e) = 1.46" in f.message and "lowest loss since was 1.47" in f.message
    assert "`2.weight`" in f.fix and f.evidence["floor"] == pytest.approx(floor_of(10))
    quiet = CrossEntropyOnProbabilities()
    for step in (0, 1):
        assert not list(quiet.observe(LossOnProbabilities(step=step, **ev)))
    assert not list(quiet.finish())


def test_a_transformers_classifier_whose_logits_the_user_softmaxes() -> None:
    """BertForSequenceClassification computes its own cross-entropy on logits: nothing. The
    user's `CrossEntropyLoss` on `softmax(outputs.logits)` fires, naming the classifier."""
    transformers = pytest.importorskip("transformers")
    import traindoc

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32, num_labels=3)
    model = transformers.BertForSequenceClassification(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for own in (True, False):
        with traindoc.watch(announce=False) as doc:
            for _ in range(6):
                ids, labels = torch.randint(0, 100, (4, 12)), torch.randint(0, 3, (4,))
                if own:
                    loss = model(input_ids=ids, labels=labels).loss
                else:
                    loss = nn.CrossEntropyLoss()(torch.softmax(model(input_ids=ids).logits, dim=-1), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
        fired = [f for f in doc.findings if f.id == "cross-entropy-on-probabilities"]
        if own:
            assert not fired
        else:
            assert fired and fired[0].evidence["layer"] == "classifier.weight [3, 32]"
            # the classifier's line in transformers' own file, where the layer is built
            assert "classifier.weight" in fired[0].where
            assert any(w.startswith("transformers/models/bert/modeling_bert.py:") for w in fired[0].where)
