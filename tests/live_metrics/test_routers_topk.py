"""Routers that are no module of their own, read from the top-k their MoE block takes over the
E router scores (on sampled steps, through the op-level mode: nothing is swapped).

Two styles, each written after reading a real repository's layer (in our own words):
- Shazeer et al.'s noisy top-k gating as standalone MoE repositories write it
  (davidmrau/mixture-of-experts): ``x @ self.w_gate`` with a ``Parameter``, a softmax, and
  ``probs.topk(k, dim=1)`` inside a gating method of the block;
- DeepSeek-MoE's ``MoEGate``: a gate module that returns the top-k indices and weights, not
  the scores, so its output cannot be read; its ``torch.topk`` can.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.events import Scalar
from traindoc.live.probes.routers import load_stats


class NoisyTopKMoE(nn.Module):
    def __init__(self, dim: int = 32, num_experts: int = 8, k: int = 2, noisy: bool = True) -> None:
        super().__init__()
        self.k, self.noisy = k, noisy
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, dim))
                                     for _ in range(num_experts))
        self.w_gate = nn.Parameter(torch.zeros(dim, num_experts))
        self.w_noise = nn.Parameter(torch.zeros(dim, num_experts))
        self.softplus = nn.Softplus()
        self.softmax = nn.Softmax(dim=1)
        self.top1: list[torch.Tensor] = []  # the test's own record of each forward's top-1 experts

    def gating(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = x @ self.w_gate
        if self.noisy and self.training:
            logits = logits + torch.randn_like(logits) * (self.softplus(x @ self.w_noise) + 1e-2)
        probs = self.softmax(logits)
        top, idx = probs.topk(self.k, dim=1)
        self.top1.append(idx[:, 0])
        gates = torch.zeros_like(probs).scatter(1, idx, top / top.sum(1, keepdim=True))
        return gates, probs

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gates, probs = self.gating(x)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows = gates[:, e] > 0
            if rows.any():
                out[rows] += gates[rows, e, None] * expert(x[rows])
        share = (gates > 0).float().mean(0) / self.k
        return x + out, len(self.experts) * (share * probs.mean(0)).sum()


class MoEGate(nn.Module):
    def __init__(self, dim: int, n_routed_experts: int, top_k: int) -> None:
        super().__init__()
        self.n_routed_experts, self.top_k = n_routed_experts, top_k
        self.weight = nn.Parameter(torch.randn(n_routed_experts, dim) / math.sqrt(dim))

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = F.linear(h, self.weight).softmax(dim=-1)
        topk_weight, topk_idx = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
        return topk_idx, topk_weight


class DeepSeekStyleMoE(nn.Module):
    def __init__(self, dim: int = 32, n_routed_experts: int = 8, top_k: int = 2) -> None:
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_routed_experts))
        self.gate = MoEGate(dim, n_routed_experts, top_k)
        self.shared_experts = nn.Linear(dim, dim)
        self.top1: list[torch.Tensor] = []  # the test's own record, from a hook on the gate

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx, weight = self.gate(x)
        out = self.shared_experts(x)
        for slot in range(idx.shape[1]):
            for e, expert in enumerate(self.experts):
                rows = idx[:, slot] == e
                if rows.any():
                    out[rows] += weight[rows, slot, None] * expert(x[rows])
        return out, x.new_zeros(())


def train(model: nn.Module, steps: int, data: Any, aux_coef: float = 0.0,
          extra: Any = None) -> tuple[dict[int, float], dict[int, float], list[str]]:
    """(traindoc's expert_gini per step, the Gini of the test's own top-1 record, the ids found)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    target = torch.randn(32, 32, generator=gen) / math.sqrt(32)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    mine: dict[int, float] = {}
    events: list[Any] = []
    with traindoc.watch(announce=False) as doc:
        doc.session.event_listeners.append(events.append)
        for step in range(steps):
            x = data(gen)
            pred, aux = model(x)
            loss = F.mse_loss(pred, x + torch.tanh(x @ target)) + aux_coef * aux
            if extra is not None:
                extra(pred)
            opt.zero_grad()
            loss.backward()
            opt.step()
            top1 = getattr(model, "top1")[-1]
            mine[step] = load_stats(torch.bincount(top1, minlength=8).float().tolist())[0]
    ours = {e.step: e.value for e in events if isinstance(e, Scalar) and e.name == "expert_gini"}
    return ours, mine, [f.id for f in doc.findings]


def normal(gen: torch.Generator) -> torch.Tensor:
    return torch.randn(256, 32, generator=gen)


def after_relu(gen: torch.Generator) -> torch.Tensor:
    return torch.rand(256, 32, generator=gen) * 2  # features out of a ReLU: all positive


def test_a_parameter_router_is_read_from_its_top_k_and_matches_the_layer() -> None:
    ours, mine, found = train(NoisyTopKMoE(), steps=60, data=normal, aux_coef=0.01)
    assert len(ours) >= 15  # the sampled steps from step 2 on
    for step, gini in ours.items():
        assert gini == pytest.approx(mine[step], abs=1e-9), step
    assert "expert-collapse" not in found


def test_a_parameter_router_that_collapses_fires() -> None:
    """No noise, the layer's zero-initialized gate, all-positive inputs and the balancing loss
    left out of the loss: every token goes to one or two experts and stays there."""
    ours, mine, found = train(NoisyTopKMoE(noisy=False), steps=120, data=after_relu)
    assert max(mine.values()) >= 0.7 and all(ours[s] == pytest.approx(mine[s], abs=1e-9) for s in ours)
    assert "expert-collapse" in found


def test_a_gate_that_returns_indices_is_read_from_its_top_k() -> None:
    model = DeepSeekStyleMoE()

    def record(module: nn.Module, inputs: Any, out: Any) -> None:  # the test's own reading
        idx, weight = out
        model.top1.append(idx.gather(1, weight.argmax(1, keepdim=True))[:, 0])

    model.gate.register_forward_hook(record)
    ours, mine, found = train(model, steps=40, data=normal)
    assert len(ours) >= 14  # from step 3: the gate's first output shows it holds no scores
    for step, gini in ours.items():
        assert gini == pytest.approx(mine[step], abs=1e-9), step
    assert "expert-collapse" not in found


def test_a_top_k_outside_the_block_is_not_a_router() -> None:
    """A top-5 accuracy over 8 outputs in the training loop, beside an 8-expert block: the loop's
    top-k is not read as a router (the loads stay the layer's own)."""
    seen: list[torch.Tensor] = []
    ours, mine, _ = train(NoisyTopKMoE(), steps=20, data=normal,
                          extra=lambda pred: seen.append(pred[:, :8].topk(5, dim=1)[1]))
    assert seen and ours
    for step, gini in ours.items():
        assert gini == pytest.approx(mine[step], abs=1e-9), step


def test_an_evaluation_inside_a_training_step_is_not_counted() -> None:
    """An evaluation forward (``eval()``, ``no_grad``) on other data between the training
    forward and its backward: the block's top-k there is not the training load."""
    model = NoisyTopKMoE()

    def evaluate(pred: torch.Tensor) -> None:
        kept = len(model.top1)
        model.eval()
        with torch.no_grad():
            model(torch.rand(256, 32) * 4)  # all positive: one expert would take them all
        # The test's own record keeps the training forward's (traindoc's nondeterministic-eval
        # check runs the first evaluation forwards twice: their records go too).
        del model.top1[kept:]
        model.train()

    ours, mine, _ = train(model, steps=20, data=normal, extra=evaluate)
    assert ours
    for step, gini in ours.items():
        assert gini == pytest.approx(mine[step], abs=1e-9), step
