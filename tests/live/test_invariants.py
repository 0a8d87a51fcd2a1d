"""Built-in invariants in process (traindoc.watch): the healthy shapes next to the zoo's failing ones."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc


def _sn_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.utils.spectral_norm(nn.Linear(16, 64)), nn.ReLU(),
                         nn.utils.spectral_norm(nn.Linear(64, 4)))


def _train(model: nn.Module, steps: int, evaluate_first: bool) -> list[str]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    with traindoc.watch(announce=False) as doc:
        if evaluate_first:
            model.eval()
            with torch.no_grad():
                model(x)
            model.train()
        for _ in range(steps):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            model(x)
    return [f.id for f in doc.findings]


def test_legacy_spectral_norm_evaluated_first_fires() -> None:
    assert "eval-before-train-forward" in _train(_sn_net(), 3, evaluate_first=True)


def test_legacy_spectral_norm_evaluated_after_training_is_quiet() -> None:
    assert "eval-before-train-forward" not in _train(_sn_net(), 3, evaluate_first=False)


def test_legacy_spectral_norm_restored_from_a_checkpoint_is_quiet() -> None:
    trained = _sn_net()
    x = torch.randn(64, 16)
    for _ in range(30):  # converge the power iteration, as a run that saved this state did
        trained(x)
    restored = _sn_net()
    restored.load_state_dict(trained.state_dict())
    assert "eval-before-train-forward" not in _train(restored, 3, evaluate_first=True)


def _fused_mlp(cast_inputs: torch.dtype | None) -> list[traindoc.Finding]:
    """A fused linear+GELU written as an autograd.Function (LT-725's shape), in bf16 autocast."""

    class FusedLinearGelu(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cpu", cast_inputs=cast_inputs)
        def forward(ctx, x, weight, bias):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(x, weight, bias)
            return F.gelu(F.linear(x, weight, bias))

        @staticmethod
        @torch.amp.custom_bwd(device_type="cpu")
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            x, weight, bias = ctx.saved_tensors
            with torch.enable_grad():
                x_, w_, b_ = (t.detach().requires_grad_() for t in (x, weight, bias))
                out = F.gelu(F.linear(x_, w_, b_))
            return torch.autograd.grad(out, (x_, w_, b_), grad)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return FusedLinearGelu.apply(x, self.fc.weight, self.fc.bias)

    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block(), nn.Linear(32, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 32), torch.randint(0, 2, (16,))
    with traindoc.watch(announce=False) as doc:
        for _ in range(4):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return doc.findings


def test_custom_fwd_casting_to_fp32_bypasses_autocast() -> None:
    found = [f for f in _fused_mlp(torch.float32) if f.id == "autocast-bypassed"]
    assert found and found[0].evidence["reason"] == "custom_fwd", found
    assert "FusedLinearGelu(0.fc.weight)" in found[0].evidence["fp32_modules"]


def test_custom_fwd_following_the_callers_autocast_is_quiet() -> None:
    assert "autocast-bypassed" not in [f.id for f in _fused_mlp(None)]


def test_a_tied_parameter_keeps_its_first_name() -> None:
    class TiedLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(16, 8)
            self.lm_head = nn.Linear(8, 16, bias=False)
            self.lm_head.weight = self.wte.weight  # weight tying, as GPT-2 does

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            return self.lm_head(self.wte(idx))

    model = TiedLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    idx = torch.randint(0, 16, (4, 5))
    with traindoc.watch(announce=False) as doc:
        F.cross_entropy(model(idx).flatten(0, 1), idx.flatten()).backward()
        opt.step()
        assert doc.session.model.param_name(model.wte.weight) == "wte.weight"
