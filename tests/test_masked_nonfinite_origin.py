"""masked-nonfinite on hand-made streams: a guard inside the model's forward fires only with a
numerical origin of the values it replaced; and the origin search on a real forward pass."""

from __future__ import annotations

from traindoc.detectors.masked_nonfinite import MaskedNonfinite
from traindoc.events import REPLACED, Activation, Backward, Event
from traindoc.events.steps import ORIGIN, REPLACED_INSIDE


def _step(step: int, *, origin: bool, inside: bool = True) -> list[Event]:
    out: list[Event] = []
    if origin:
        out.append(Activation(step=step, module="flows.2", type=f"{ORIGIN} log at flow.py:40", nan=True))
    if inside:
        out.append(Activation(step=step, module="nan_to_num at flow.py:61", type=REPLACED_INSIDE))
    else:
        out.append(Activation(step=step, module="nan_to_num at train.py:80", type=REPLACED, nan=True,
                              is_output=True))
    out.append(Backward(step=step, value=2.5, constant=False))
    return out


def _run(events: list[Event]) -> list:
    det = MaskedNonfinite()
    return [f for e in events for f in det.observe(e)] + list(det.finish())


def test_a_guard_inside_the_model_with_a_numerical_origin_fires() -> None:
    found = _run(_step(0, origin=False) + _step(1, origin=True) + _step(2, origin=True))
    assert found and found[0].step == 1
    ev = found[0].evidence
    assert ev["born_in"] == "log" and ev["born_module"] == "flows.2" and ev["guard"] == "inside"
    assert "flow.py:61" in found[0].where and "flow.py:40" in found[0].where


def test_a_guard_inside_the_model_without_an_origin_is_masking_by_design() -> None:
    assert _run(_step(0, origin=False) + _step(1, origin=False) + _step(2, origin=False)) == []


def test_a_guard_in_the_loss_code_fires_at_once_and_learns_its_origin_later() -> None:
    found = _run(_step(0, origin=False, inside=False) + _step(1, origin=True, inside=False))
    assert found[0].step == 0 and found[0].evidence["born_in"] == ""
    assert found[-1].step == 0 and found[-1].evidence["born_in"] == "log"


def test_origin_search_on_a_forward_pass() -> None:
    """The live probes: `log` of a negative in module `layer`, replaced by nan_to_num in the model."""
    import torch

    from traindoc.live.probes import Probes
    from traindoc.live.session import Session

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor([-1.0, 1.0]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.log(x * self.w)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = Layer()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nan_to_num(self.layer(x), nan=0.0)

    session = Session(level="standard", select=["masked-nonfinite"])
    session.start("test", [])
    probes = Probes(session)
    probes.install()
    try:
        model = Model()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.ones(4, 2)
        for _ in range(4):
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        probes.uninstall()
    report = session.finish()
    found = [f for f in report.findings if f.id == "masked-nonfinite"]
    assert found and found[0].evidence["born_in"] == "log" and found[0].evidence["born_module"] == "layer"
    assert found[0].evidence["guard"] == "inside"
    assert torch.isfinite(model.layer.w).all()
