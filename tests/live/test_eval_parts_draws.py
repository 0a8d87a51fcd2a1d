"""RandomDraws, the eval probe's record of a re-run's random ops: a draw from a distribution the
model predicts (torch.distributions, or a draw scaled by a tensor the forward computed) is a
sample on purpose; noise of a fixed scale and functional dropout are not."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from traindoc.live.probes.eval_parts import RandomDraws


def _draws(fn: Callable[[torch.Tensor, torch.Tensor], object]) -> RandomDraws:
    mu, logvar = torch.randn(4, 3), torch.randn(4, 3)
    draws = RandomDraws()
    with torch.no_grad(), draws:
        fn(mu, logvar)
    return draws


def test_a_reparameterized_draw_is_a_sample() -> None:
    d = _draws(lambda mu, logvar: mu + torch.randn_like(mu) * torch.exp(0.5 * logvar))
    assert d.sampled and not d.other


def test_an_in_place_draw_scaled_by_method_calls_is_a_sample() -> None:
    def forward(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
        std = logvar.mul(0.5).exp_()
        return std.new(std.size()).normal_().mul(std).add_(mu)

    d = _draws(forward)
    assert d.sampled and not d.other


def test_a_distribution_draw_is_a_sample() -> None:
    d = _draws(lambda mu, logvar: torch.distributions.Normal(mu, logvar.exp()).sample())
    assert d.sampled and not d.other


def test_noise_of_a_fixed_scale_is_not() -> None:
    d = _draws(lambda mu, logvar: mu + 0.3 * torch.randn_like(mu))
    assert d.other and not d.sampled


def test_a_sample_beside_functional_dropout_is_not_only_a_sample() -> None:
    d = _draws(lambda mu, logvar: F.dropout(mu + torch.randn_like(mu) * logvar.exp(), p=0.2))
    assert d.sampled and d.other
