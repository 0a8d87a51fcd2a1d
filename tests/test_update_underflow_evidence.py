"""update-underflow quotes the step and the spacing of the parameters that stayed put: in a ViT
cast to bf16 (timm's train.py --model-dtype bfloat16) most tensors are biases near 0, whose
spacing is tiny and whose updates land, and a median over all of them read "step 5e-05 against
spacing 1e-06", as if nothing rounded away. Synthetic event streams, replayed without torch."""

from __future__ import annotations

from traindoc.analyze import analyze
from traindoc.events import Event, ParamStats, RunEnd, RunStart


def _stream(biases: int) -> list[Event]:
    events: list[Event] = [RunStart(source="live")]
    for step in range(6):
        # two norm gains at 1.0: spacing 2**-7, the step 5e-05 rounds away
        for i in range(2):
            events.append(ParamStats(step=step, name=f"blocks.{i}.norm.weight", dtype="torch.bfloat16", numel=4096,
                                     requires_grad=True, norm=64.0, grad=0.1, has_grad=True, unchanged=1.0,
                                     spacing=2.0 ** -7, intended=5e-5))
        # many small biases near 0: spacing 2**-20, their updates land
        for i in range(biases):
            events.append(ParamStats(step=step, name=f"blocks.{i}.bias", dtype="torch.bfloat16", numel=64,
                                     requires_grad=True, norm=1e-3, grad=0.1, has_grad=True, unchanged=0.05,
                                     spacing=2.0 ** -20, intended=5e-5))
    events.append(RunEnd(steps=6))
    return events


def test_the_quoted_spacing_is_that_of_the_weights_that_stayed_put() -> None:
    found = [f for f in analyze(_stream(biases=8)).findings if f.id == "update-underflow"]
    assert found, "the norm gains never moved: must fire"
    assert found[0].evidence["spacing"] == 2.0 ** -7
    assert found[0].evidence["intended_update"] == 5e-5
    assert "parameters left mostly unchanged" in found[0].message


def test_moving_biases_alone_are_quiet() -> None:
    events = [e for e in _stream(biases=8) if not (isinstance(e, ParamStats) and "norm" in e.name)]
    assert "update-underflow" not in [f.id for f in analyze(events).findings]
