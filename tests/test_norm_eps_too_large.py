"""norm-eps-too-large on hand-made events (fires / stays quiet) and the live measurement of
what a normalization layer divides by, checked against the layer's own output."""

from __future__ import annotations

import inspect

import pytest
import torch

import traindoc
from traindoc.detectors.norm_eps_too_large import NormEpsTooLarge
from traindoc.events import NormInput
from traindoc.live.measure import norm_divisor


def _run(events: list[NormInput]) -> list:
    det = NormEpsTooLarge()
    found = [f for e in events for f in det.observe(e)]
    return found + list(det.finish())


def _steps(eps: float, var: float, module: str = "model.4", n: int = 4) -> list[NormInput]:
    return [NormInput(step=10 * s, module=module, cls="BatchNorm2d", eps=eps, var=var) for s in range(n)]


def test_fires_when_eps_dominates_the_variance() -> None:
    found = _run(_steps(0.8, 1e-4) + _steps(0.8, 3e-4, module="conv_blocks.3"))
    assert found and found[0].step == 0
    last = found[-1]
    assert last.evidence["count"] == 2
    ev = last.evidence
    assert (ev["modules"], ev["classes"], ev["eps"]) == (["model.4", "conv_blocks.3"], ["BatchNorm2d"] * 2, [0.8, 0.8])
    assert (ev["variance"], ev["sampled_steps"]) == ([1e-4, 3e-4], [4, 4])
    assert "its output's std is 0.0112 instead of 1" in last.message
    assert "momentum" in last.cause and "nn.BatchNorm2d(C)" in last.fix


def test_quiet_when_a_large_eps_is_small_next_to_the_variance() -> None:
    assert _run(_steps(0.05, 2.0)) == []


def test_quiet_below_min_eps_and_before_confirm() -> None:
    assert _run(_steps(5e-3, 1e-4)) == []  # a Keras-like eps, measured live (> 1e-3) but not judged
    assert _run(_steps(0.8, 1e-4, n=2)) == []


@pytest.mark.parametrize("layer,shape", [
    (torch.nn.BatchNorm2d(6, eps=0.5, affine=False), (8, 6, 5, 5)),
    (torch.nn.BatchNorm1d(6, eps=0.5, affine=False), (16, 6)),
    (torch.nn.InstanceNorm2d(6, eps=0.5), (4, 6, 7, 7)),
    (torch.nn.GroupNorm(3, 6, eps=0.5, affine=False), (4, 6, 5, 5)),
    (torch.nn.LayerNorm([5, 5], eps=0.5, elementwise_affine=False), (4, 6, 5, 5)),
])
def test_divisor_is_what_the_layer_divides_by(layer: torch.nn.Module, shape: tuple[int, ...]) -> None:
    """The layer's output has variance var / (var + eps) over what it normalizes, so
    var = eps * r / (1 - r): the median of that over the groups is the measured divisor."""
    torch.manual_seed(0)
    x = torch.randn(shape) * torch.linspace(0.1, 2.0, shape[1]).reshape(1, -1, *[1] * (len(shape) - 2))
    out = layer.train()(x)
    divisor = norm_divisor(layer, x)
    assert divisor is not None
    measured = float(divisor)
    if isinstance(layer, torch.nn.BatchNorm2d | torch.nn.BatchNorm1d):
        r = out.var([d for d in range(out.ndim) if d != 1], unbiased=False)
    elif isinstance(layer, torch.nn.GroupNorm):
        r = out.reshape(shape[0], 3, -1).var(-1, unbiased=False)
    else:
        r = out.flatten(2 if isinstance(layer, torch.nn.InstanceNorm2d) else -2).var(-1, unbiased=False)
    reference = float((0.5 * r / (1 - r)).reshape(-1).median())
    assert measured == pytest.approx(reference, rel=1e-3)


def test_rms_norm_divides_by_the_mean_square() -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 16) * 0.3
    layer = torch.nn.RMSNorm(16, eps=0.5, elementwise_affine=False)
    r = layer(x).pow(2).mean(-1)
    divisor = norm_divisor(layer, x)
    assert divisor is not None and float(divisor) == pytest.approx(float((0.5 * r / (1 - r)).median()), rel=1e-3)


def test_other_modules_are_not_measured() -> None:
    assert norm_divisor(torch.nn.Linear(3, 3), torch.randn(2, 3)) is None


def test_the_finding_names_where_the_layer_was_built() -> None:
    found = _run(_steps(0.8, 1e-4) + [NormInput(step=40, module="model.4", cls="BatchNorm2d", eps=0.8, var=1e-4,
                                                where="gan.py:82")])
    assert "model.4 (BatchNorm2d, built at gan.py:82)" in found[-1].message
    assert list(found[-1].where) == ["gan.py:82"] and "at gan.py:82" in found[-1].fix


def test_live_measures_and_names_the_line_that_built_the_layer() -> None:
    torch.manual_seed(0)
    with traindoc.watch(announce=False) as doc:
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16, 0.8), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 1))
        line = inspect.currentframe().f_lineno - 2  # type: ignore[union-attr]
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.normal_(m.weight, 0.0, 0.02)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(20):
            loss = model(torch.randn(32, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    (found,) = [f for f in doc.findings if f.id == "norm-eps-too-large"]
    assert found.step == 0 and found.evidence["modules"] == ["1"]
    assert found.evidence["built_at"] == [f"tests/test_norm_eps_too_large.py:{line}"]
    variances = found.evidence["variance"]
    assert isinstance(variances, list) and isinstance(variances[0], float)
    assert variances[0] < 0.01  # N(0, 0.02) weights on unit inputs: ~0.003
