"""MoE routers: recognized next to their experts or named with watch_router; load Gini/entropy."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.events import Scalar
from traindoc.live.probes.routers import load_stats


class MoE(nn.Module):
    def __init__(self, dim: int = 8, experts: int = 4, gate_name: str = "gate", with_list: bool = True) -> None:
        super().__init__()
        setattr(self, gate_name, nn.Linear(dim, experts))
        self.gate_name = gate_name
        if with_list:
            self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))
        else:
            self.w = nn.Parameter(torch.randn(experts, dim, dim) * 0.1)  # batched experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = F.softmax(getattr(self, self.gate_name)(x), -1)
        w, idx = probs.max(-1)
        if hasattr(self, "experts"):
            out = torch.stack([e(x) for e in self.experts], 1)  # [tokens, E, dim]
        else:
            out = torch.einsum("td,edh->teh", x, self.w)
        return x + w[:, None] * out[torch.arange(len(x)), idx]


def run(model: nn.Module, steps: int = 20, bias: float = 0.0) -> list[tuple[int, str, float]]:
    torch.manual_seed(0)
    gate = getattr(model, model.gate_name)  # type: ignore[attr-defined]
    with torch.no_grad():
        gate.bias.fill_(0.0)
        gate.bias[0] += bias
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    events: list[object] = []
    with traindoc.watch(announce=False) as doc:
        doc.session.event_listeners.append(events.append)
        for _ in range(steps):
            loss = model(torch.randn(64, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return [(e.step, e.name, e.value) for e in events if isinstance(e, Scalar) and e.name.startswith("expert_")]


def test_load_stats_reference_values() -> None:
    assert load_stats([5, 5, 5, 5]) == (0.0, pytest.approx(math.log(4)))
    gini, entropy = load_stats([0, 0, 0, 12])
    assert gini == pytest.approx(3 / 4) and entropy == 0.0
    gini, _ = load_stats([1, 3])  # |1-3| * 2 / (2 * 2 * 4)
    assert gini == pytest.approx(0.25)


def test_a_gate_next_to_its_experts_is_recognized_without_code() -> None:
    got = run(MoE())
    steps = sorted({s for s, _, _ in got})
    assert steps and steps[0] <= 2 and {n for _, n, _ in got} == {"expert_gini", "expert_entropy"}
    assert all(0 <= v <= 0.75 for _, n, v in got if n == "expert_gini")


def test_gini_matches_the_argmax_load() -> None:
    got = dict(((s, n), v) for s, n, v in run(MoE(), bias=50.0))  # every token on expert 0
    ginis = [v for (s, n), v in got.items() if n == "expert_gini"]
    assert ginis and all(g == pytest.approx(0.75) for g in ginis)
    assert all(v == 0.0 for (s, n), v in got.items() if n == "expert_entropy")


def test_any_linear_with_one_output_per_expert_next_to_the_experts_is_a_router() -> None:
    assert run(MoE(gate_name="selector"))


def test_an_unrecognized_router_needs_watch_router() -> None:
    plain = MoE(gate_name="selector", with_list=False)  # batched experts, no count attribute
    assert run(plain) == []
    named = MoE(gate_name="selector", with_list=False)
    traindoc.watch_router(named.selector, experts=4)
    assert run(named)


def test_batched_experts_with_a_count_attribute_and_a_gate() -> None:
    model = MoE(with_list=False)
    model.num_experts = 4  # type: ignore[assignment]
    assert run(model)


def test_a_gated_mlp_is_not_a_router() -> None:
    class GatedMLP(nn.Module):  # LLaMA's MLP: gate_proj, up_proj, down_proj
        def __init__(self) -> None:
            super().__init__()
            self.gate_proj, self.up_proj, self.down_proj = nn.Linear(8, 16), nn.Linear(8, 16), nn.Linear(16, 8)
            self.gate_name = "gate_proj"

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    assert run(GatedMLP()) == []


def test_watch_router_validates_and_returns_the_module() -> None:
    m = nn.Linear(4, 4)
    assert traindoc.watch_router(m) is m
    with pytest.raises(ValueError, match="experts must be >= 2"):
        traindoc.watch_router(m, experts=1)


def test_the_runs_last_step_is_measured_too() -> None:
    """The last round closes with the run, not with a next step: its loads are still read."""
    steps = sorted({s for s, _, _ in run(MoE(), steps=6)})
    # Round 0 ends at step 1's backward: the router is found there, after step 1's forward.
    assert steps == [2, 3, 4, 5]
