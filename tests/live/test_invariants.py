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
