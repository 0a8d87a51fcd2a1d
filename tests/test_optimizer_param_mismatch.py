"""optimizer-param-mismatch names its cause from what the run shows: parameters left out of an
optimizer whose own parameters all train, or an optimizer left holding tensors the model no
longer uses (a model re-created, or a head swapped, after the optimizer was built)."""

from __future__ import annotations

from traindoc.detectors.optimizer_param_mismatch import OptimizerParamMismatch
from traindoc.events import ParamStats


def _run(events: list[ParamStats]):
    det = OptimizerParamMismatch()
    for e in events:
        list(det.observe(e))
    (found,) = det.finish()
    return found


def _p(name: str, optimizer: int, has_grad: bool, requires_grad: bool = True) -> ParamStats:
    return ParamStats(step=0, name=name, dtype="torch.float32", numel=4, requires_grad=requires_grad,
                      norm=1.0, has_grad=has_grad, optimizer=optimizer)


def test_a_temperature_left_out_of_the_optimizer() -> None:
    found = _run([_p("student.fc.weight", 0, True), _p("log_t", -1, True)])
    assert "train beside them" in found.message
    assert "no optimizer was handed them" in found.cause and "log_t" in found.fix
    assert found.evidence["held_without_gradient"] == []


def test_a_head_swapped_after_the_optimizer_was_built() -> None:
    found = _run([_p("backbone.weight", 0, True), _p("group0.param4[1000, 128]", 0, False),
                  _p("head.weight", -1, True)])
    assert "never got a gradient (group0.param4[1000, 128])" in found.message
    assert "re-created" in found.cause and "no optimizer was handed them" not in found.cause
    assert found.evidence["held_without_gradient"] == ["group0.param4[1000, 128]"]


def test_a_frozen_held_parameter_is_no_orphan() -> None:
    found = _run([_p("backbone.weight", 0, False, requires_grad=False), _p("fc.weight", 0, True),
                  _p("extra.bias", -1, True)])
    assert found.evidence["held_without_gradient"] == [] and "no optimizer was handed them" in found.cause
