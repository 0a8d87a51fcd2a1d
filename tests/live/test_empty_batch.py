"""A loss over an empty selection is NaN (the mean of nothing), and nonfinite says so: the
split or filter that selected no row, not "an op outside its domain".

Two styles. A full-graph node classifier, after pytorch/examples' gat/main.py: the nodes are
split by slicing one permutation at fixed sizes (there: test 1200, validation 400, the rest
for training), and a graph smaller than those sizes leaves the training split empty; the loss
is an ``nn.NLLLoss`` module (the module's input had no row). And a semi-supervised classifier
whose pseudo-label loss keeps the unlabeled rows the model is confident about through a boolean
mask, ``F.cross_entropy`` on the selection, added to the supervised loss: a threshold no row
passes makes the sum NaN (a mean deeper in the loss's graph, a function, no module).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.findings import Finding


def node_classifier(nodes: int, steps: int = 12) -> list[float]:
    torch.manual_seed(0)
    labels = torch.randint(0, 4, (nodes,))
    feats = F.one_hot(labels, 4).float() + 0.5 * torch.randn(nodes, 4)
    adj = (torch.rand(nodes, nodes) < 0.02).float() + torch.eye(nodes)
    adj = adj / adj.sum(1, keepdim=True)
    order = torch.randperm(nodes)
    train_nodes = order[160:]  # after 120 test and 40 validation nodes
    w1, w2 = nn.Linear(4, 16), nn.Linear(16, 4)
    opt = torch.optim.Adam([*w1.parameters(), *w2.parameters()], lr=0.01)
    criterion = nn.NLLLoss()
    losses = []
    for _ in range(steps):
        out = F.log_softmax(adj @ w2(F.relu(adj @ w1(feats))), dim=1)
        loss = criterion(out[train_nodes], labels[train_nodes])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def pseudo_labels(threshold: float, steps: int = 12) -> list[float]:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
        unlabeled = torch.randn(64, 8)
        supervised = F.cross_entropy(model(x), y)
        logits = model(unlabeled)
        confidence, guess = logits.detach().softmax(-1).max(-1)
        keep = confidence > threshold
        unsupervised = F.cross_entropy(logits[keep], guess[keep])
        loss = supervised + 0.5 * unsupervised
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def findings(run: Callable[[], object]) -> dict[str, Finding]:
    with traindoc.watch(announce=False, level="thorough") as doc:
        run()
    return {f.id: f for f in doc.report().findings}


def nonfinite(run: Callable[[], object]) -> Finding | None:
    return findings(run).get("nonfinite")


def test_an_empty_training_split_is_named_on_the_loss_module() -> None:
    assert all(v == v for v in node_classifier(400))  # the split holds 240 nodes: finite
    assert nonfinite(lambda: node_classifier(400)) is None
    f = nonfinite(lambda: node_classifier(150))  # 150 nodes: the training split is empty
    assert f is not None and f.step == 0
    assert f.evidence["module"] == "NLLLoss" and f.evidence["empty_input"] is True
    assert "no element" in f.message and "empty batch" in f.cause


def test_zero_gradients_from_a_nan_loss_point_at_its_origin() -> None:
    """Every gradient is 0 (the mean of nothing has no input to flow back to), so constant-loss
    fires too: it counts the NaN handed to backward on each of its steps (NaN != NaN once
    counted each apart) and names nonfinite's origin as the root cause, not a replaced loss."""
    c = findings(lambda: node_classifier(150))["constant-loss"]
    n = c.evidence["zero_gradient_steps"]
    assert n == 12 and f"was nan on {n} of them" in c.message
    assert "`nonfinite`" in c.cause and "replace" not in c.fix


def test_an_empty_pseudo_label_selection_is_named_on_the_loss_function() -> None:
    assert nonfinite(lambda: pseudo_labels(threshold=0.0)) is None  # every row kept
    f = nonfinite(lambda: pseudo_labels(threshold=1.0))  # no confidence passes 1.0
    assert f is not None and f.step == 0
    assert f.evidence["module"] == "nll_loss()" and f.evidence["empty_input"] is True
    assert "empty batch" in f.cause and "Print the size of the selection" in f.fix
