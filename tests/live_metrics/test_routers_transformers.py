"""Routers of transformers' own mixture-of-experts models, recognized as their users build them
(tiny configs built in code): transformers 5 holds the routed experts fused in one module
(``MixtralExperts``, with ``num_experts``) beside a ``gate``/``router`` module, not in a
``ModuleList``. The loads traindoc reads are checked against the router logits transformers
itself returns (``output_router_logits=True``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import traindoc
from traindoc.events import Scalar
from traindoc.live.probes.routers import load_stats

transformers = pytest.importorskip("transformers")

TINY: dict[str, Any] = dict(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)
MODELS: dict[str, dict[str, Any]] = {
    "Mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "Qwen2Moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                     shared_expert_intermediate_size=16),
    "Qwen3Moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16),
    "Olmoe": dict(num_experts=4, num_experts_per_tok=2, eos_token_id=None, pad_token_id=None),
    "GptOss": dict(num_local_experts=4, num_experts_per_tok=2, head_dim=8),
    "GraniteMoe": dict(num_local_experts=4, num_experts_per_tok=2),
}


def build(name: str, **extra: Any) -> Any:
    torch.manual_seed(0)
    config = getattr(transformers, f"{name}Config")(**TINY, **MODELS[name], **extra)
    return getattr(transformers, f"{name}ForCausalLM")(config)


def train(model: Any, steps: int) -> tuple[dict[int, float], dict[int, float], list[Any]]:
    """(traindoc's expert_gini per step, the Gini of transformers' own router logits per step,
    the findings)."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    theirs: dict[int, float] = {}
    events: list[Any] = []
    with traindoc.watch(announce=False) as doc:
        doc.session.event_listeners.append(events.append)
        for step in range(steps):
            x = torch.randint(0, 64, (4, 16))
            out = model(input_ids=x, labels=x, output_router_logits=True)
            opt.zero_grad()
            out.loss.backward()
            opt.step()
            loads = [torch.bincount(r.argmax(-1), minlength=r.shape[-1]).tolist() for r in out.router_logits]
            theirs[step] = max(load_stats(v)[0] for v in loads)  # the most collapsed layer
    ours = {e.step: e.value for e in events if isinstance(e, Scalar) and e.name == "expert_gini"}
    return ours, theirs, doc.findings


@pytest.mark.parametrize("name", MODELS)
def test_a_transformers_moe_router_is_recognized_and_its_load_measured(name: str) -> None:
    ours, theirs, findings = train(build(name), steps=8)
    assert len(ours) >= 5, ours  # from step 2: the router is found when round 0 ends
    for step, gini in ours.items():
        assert gini == pytest.approx(theirs[step], abs=1e-9), (step, gini, theirs[step])
    assert not [f for f in findings if f.id == "expert-collapse"]


def test_a_router_whose_bias_sends_every_token_to_one_expert_fires() -> None:
    """GPT-OSS's router has a bias: one frozen at +20 for expert 0 routes every token there."""
    model = build("GptOss")
    for layer in model.model.layers:
        with torch.no_grad():
            layer.mlp.router.bias[0] = 20.0
        layer.mlp.router.bias.requires_grad_(False)
    ours, theirs, findings = train(model, steps=30)
    assert set(ours.values()) == {0.75} and theirs[29] == 0.75
    fired = [f for f in findings if f.id == "expert-collapse"]
    assert fired and fired[0].step is not None and fired[0].step <= 8
