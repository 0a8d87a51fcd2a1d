"""Loss terms from the autograd graph, their gradient shares, and loss-term-imbalance.

The shares are checked against a slow reference (``torch.autograd.grad`` of each weighted term
written out by hand); training with a multi-term loss stays bit-identical under traindoc.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.detectors.loss_term_imbalance import LossTermImbalance
from traindoc.events import LossTerm
from traindoc.live.probes import losses


def terms_of(loss: torch.Tensor, **names: torch.Tensor) -> list[tuple[str, float, str]]:
    root, nr = losses._peel(loss.grad_fn, 0)
    variables = {t.grad_fn: (n, t) for n, t in names.items()}
    return [(t.name, t.scale * t.inner, t.named) for t in losses._split(root, nr, {}, variables)]


def test_the_graph_gives_terms_and_weights() -> None:
    a = torch.randn(5, requires_grad=True)
    l1, l2, l3 = a.pow(2).mean(), a.abs().sum(), F.mse_loss(a, torch.zeros(5))
    assert terms_of(100 * l1 + l2, l1=l1, l2=l2) == [("l1", 100.0, "variable"), ("l2", 1.0, "variable")]
    assert terms_of(l1 * 0.5 - l2 / 4, l1=l1, l2=l2) == [("l1", 0.5, "variable"), ("l2", -0.25, "variable")]
    assert terms_of((l1 + 2 * l2) / 8, l1=l1, l2=l2) == [("l1", 1.0, "variable"), ("l2", 2.0, "variable")]  # / accum
    assert terms_of(l1.add(l3, alpha=3)) == [("mean", 1.0, "op"), ("mse_loss", 3.0, "op")]
    assert terms_of(-l1 + l2 + 0.0 * l3) == [("mean", -1.0, "op"), ("sum", 1.0, "op")]  # weight 0: off
    assert terms_of(l1 * l2) == [("mul", 1.0, "op")]  # a product is one term


def test_a_variable_holding_a_sum_of_unnamed_parts_is_one_term() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    ce = model(torch.randn(4, 3)).pow(2).mean()
    l2 = sum(p.pow(2).sum() for p in model.parameters())
    assert terms_of(ce + 1e-4 * l2, ce=ce, l2=l2) == [("ce", 1.0, "variable"), ("l2", 1e-4, "variable")]


def test_a_weight_held_in_a_tensor_is_found() -> None:
    a = torch.randn(5, requires_grad=True)
    l1, l2 = a.pow(2).mean(), a.abs().sum()
    w = torch.tensor(3.0)
    assert terms_of(w * l1 + l2 / w, l1=l1, l2=l2) == [("l1", 3.0, "variable"), ("l2", pytest.approx(1 / 3), "variable")]


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.reg = nn.Linear(16, 1)
        self.cls = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(x)
        return self.reg(h), self.cls(h)


def train(steps: int, weight: float, explicit: bool = False) -> tuple[nn.Module, list[torch.Tensor], list[dict[str, float]]]:
    """A two-head model with ``loss = weight * loss_reg + loss_cls``; returns the model, the
    gradients after each backward and the reference gradient norms of the weighted terms."""
    torch.manual_seed(0)
    model = TwoHeads()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    grads, reference = [], []
    for _ in range(steps):
        x, y, c = torch.randn(32, 6), torch.randn(32, 1), torch.randint(0, 3, (32,))
        pred, logits = model(x)
        loss_reg = F.mse_loss(pred, y)
        loss_cls = F.cross_entropy(logits, c)
        if explicit:
            loss = traindoc.loss_terms(reg=weight * loss_reg, cls=loss_cls)
        else:
            loss = weight * loss_reg + loss_cls
        params = list(model.parameters())
        ref = {}
        for name, term in (("reg", weight * loss_reg), ("cls", loss_cls)):
            g = torch.autograd.grad(term, model.trunk.parameters(), retain_graph=True)  # the shared part
            ref[name] = math.sqrt(sum(float(t.pow(2).sum()) for t in g))
        reference.append(ref)
        opt.zero_grad()
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in params]).clone())
        opt.step()
    return model, grads, reference


def run_watched(fn, **options: object):  # type: ignore[no-untyped-def]
    events: list[object] = []
    with traindoc.watch(announce=False, **options) as doc:
        doc.session.event_listeners.append(events.append)
        out = fn()
    return doc, events, out


def test_gradient_shares_match_a_reference_and_training_is_bit_identical() -> None:
    bare_model, bare_grads, reference = train(6, 100.0)
    doc, events, (model, grads, _) = run_watched(lambda: train(6, 100.0))
    for a, b in zip(bare_grads, grads):
        assert torch.equal(a, b)  # .grad untouched: the user's backward computed the same
    for a, b in zip(bare_model.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)
    terms = [e for e in events if isinstance(e, LossTerm)]
    assert {e.step for e in terms} == {0, 1, 2}  # the first three measured steps
    for e in terms:
        name = e.name.removeprefix("loss_")
        assert e.named == "variable" and e.terms == 2 and e.shared == 2 and e.params == 6
        assert e.grad == pytest.approx(reference[e.step][name], rel=1e-5)
        assert e.weight == (100.0 if name == "reg" else 1.0)
    found = {f.id: f for f in doc.report().findings}
    f = found["loss-term-imbalance"]
    assert f.step == 0 and f.evidence["dominant"] == "loss_reg"
    assert "loss_reg (weight 100) supplies" in f.message and "test_loss_terms.py" in f.where[-1]


def test_equal_weights_stay_quiet() -> None:
    doc, events, _ = run_watched(lambda: train(6, 1.0))
    assert [e for e in events if isinstance(e, LossTerm)]
    assert "loss-term-imbalance" not in {f.id for f in doc.report().findings}


def test_explicit_names_with_weighted_terms() -> None:
    doc, events, (model, _, reference) = run_watched(lambda: train(4, 100.0, explicit=True))
    terms = [e for e in events if isinstance(e, LossTerm)]
    assert {e.name for e in terms} == {"reg", "cls"} and {e.named for e in terms} == {"user"}
    reg = next(e for e in terms if e.name == "reg" and e.step == 0)
    assert reg.weight == 100.0 and reg.grad == pytest.approx(reference[0]["reg"], rel=1e-5)
    assert reg.value is not None and reg.value > 0


def test_loss_terms_without_traindoc_is_the_sum() -> None:
    a, b = torch.tensor(2.0), torch.tensor(3.0)
    assert traindoc.loss_terms(a=a, b=b).item() == 5.0
    with pytest.raises(ValueError, match="at least one"):
        traindoc.loss_terms()


def test_checkpointed_models_are_not_measured() -> None:
    import torch.utils.checkpoint as ckpt

    with traindoc.watch(announce=False) as doc:
        events: list[object] = []
        doc.session.event_listeners.append(events.append)
        checkpoint = ckpt.checkpoint  # the patched one, as a script importing it now gets
        torch.manual_seed(0)
        model = TwoHeads()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            h = checkpoint(model.trunk, torch.randn(8, 6), use_reentrant=False)
            loss = 100 * model.reg(h).pow(2).mean() + model.cls(h).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not [e for e in events if isinstance(e, LossTerm)]
    assert doc.report().disabled == []


def test_module_backward_hooks_are_not_run_twice() -> None:
    calls = []
    with traindoc.watch(announce=False):
        torch.manual_seed(0)
        model = TwoHeads()
        model.trunk.register_full_backward_hook(lambda *a: calls.append(1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            pred, logits = model(torch.randn(8, 6))
            loss = 100 * pred.pow(2).mean() + logits.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert len(calls) == 3


# ---- the detector on its own ------------------------------------------------------------------------
def stream(rows: list[tuple[str, float, float]], steps: int = 3, all_grad: float | None = None) -> list[LossTerm]:
    return [LossTerm(step=s, name=n, weight=w, grad=g, grad_all=g if all_grad is None else all_grad,
                     terms=len(rows), shared=4, params=8, named="variable")
            for s in range(steps) for n, w, g in rows]


def judge(events: list[LossTerm]) -> list[object]:
    det = LossTermImbalance()
    out = [f for e in events for f in det.observe(e)]
    return out + list(det.finish())


def test_an_upweighted_term_that_takes_all_the_gradient_fires() -> None:
    found = judge(stream([("loss_delta", 100.0, 50.0), ("loss_dag", 1.0, 0.5)]))
    assert found and found[0].id == "loss-term-imbalance" and found[0].step == 0
    assert "Lower the weight of loss_delta (about 1 gives" in found[0].fix


def test_a_small_regularizer_under_a_main_loss_stays_quiet() -> None:
    assert judge(stream([("ce", 1.0, 5.0), ("aux", 0.01, 0.01)])) == []


def test_a_downweighted_term_that_dominates_fires() -> None:
    found = judge(stream([("recon", 1.0, 0.1), ("acyclic", 0.1, 500.0)]))
    assert found and found[0].evidence["dominant"] == "acyclic"
    assert "smaller than recon's" in found[0].cause


def test_a_term_that_dominates_only_the_parameters_it_acts_on_stays_quiet() -> None:
    # A balancing loss on the router: most of the router's gradient, little of the model's.
    events = []
    for s in range(3):
        events += [LossTerm(step=s, name="mse", weight=1.0, grad=0.001, grad_all=0.5, shared=2, params=30),
                   LossTerm(step=s, name="aux", weight=0.1, grad=0.05, grad_all=0.05, shared=2, params=30)]
    assert judge(events) == []


def test_fewer_than_confirm_steps_stay_quiet() -> None:
    assert judge(stream([("a", 100.0, 50.0), ("b", 1.0, 0.5)], steps=2)) == []


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="share must be in"):
        LossTermImbalance.Config(share=0.3)
