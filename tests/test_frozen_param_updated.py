"""frozen-param-updated on hand-made events: a frozen parameter moved by a stale or zero
gradient fires; one whose gradient the script writes fresh at every step (torch.func training
on detached tensors, zoo/healthy_dp_sgd_functional.py) does not."""

from __future__ import annotations

from traindoc.detectors.frozen_param_updated import FrozenParamUpdated
from traindoc.events import ParamStats


def _frozen(step: int, grad: float | None) -> ParamStats:
    return ParamStats(step=step, name="backbone.weight", dtype="torch.float32", numel=100, requires_grad=False,
                      norm=1.0, grad=grad, has_grad=grad is not None, update=1e-3)


def _run(events: list[ParamStats]) -> list:
    det = FrozenParamUpdated()
    return [f for e in events for f in det.observe(e)] + list(det.finish())


def test_fires_on_a_zero_gradient_with_momentum() -> None:
    (found,) = _run([_frozen(10, 0.0)])
    assert found.step == 10 and found.evidence["parameters"] == ["backbone.weight"]


def test_fires_at_the_first_step_of_a_stale_gradient() -> None:
    (found,) = _run([_frozen(10, 0.37), _frozen(35, 0.37), _frozen(60, 0.37)])
    assert found.step == 10


def test_quiet_when_the_script_writes_a_fresh_gradient_each_step() -> None:
    assert _run([_frozen(s, 0.3 + 0.01 * s) for s in range(0, 100, 25)]) == []
