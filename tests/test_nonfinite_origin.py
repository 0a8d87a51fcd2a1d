"""nonfinite traces a non-finite loss to the op that made it: on hand-made events, and live in
two styles (a loss written in the loop, a head inside the model), each with a case that has no
birth to name (NaN that came in with the data)."""

from __future__ import annotations

import inspect

import torch

from traindoc.detectors.nonfinite import Nonfinite
from traindoc.events import STEPPED, Activation, Event, RunStart, Scalar, StepEnd
from traindoc.events.steps import LOSS_ORIGIN


def _events(origin_at: int | None) -> list[Event]:
    out: list[Event] = [RunStart(source="live")]
    for step in range(4):
        out.append(Scalar(step=step, name="loss", value=float("nan")))
        if step == origin_at:
            out.append(Activation(step=step, module="head", type=f"{LOSS_ORIGIN} log at train.py:12"))
        out.append(StepEnd(step=step, optimizer=0, outcome=STEPPED))
    return out


def _judge(events: list[Event]) -> list:
    det = Nonfinite()
    return [f for e in events for f in det.observe(e)] + list(det.finish())


def test_the_first_finding_is_refined_with_the_origin_a_later_step_traced() -> None:
    found = _judge(_events(origin_at=2))
    assert found[0].step == 0 and found[0].evidence["born_in"] == ""
    last = found[-1]
    assert last.step == 0 and last.evidence["born_in"] == "log (train.py:12) in module head"
    assert last.where[0] == "train.py:12" and "traced on step 2" in last.message
    assert "its inputs were finite" in last.cause and "logits" in last.fix


def test_without_an_origin_the_finding_names_no_op() -> None:
    found = _judge(_events(origin_at=None))
    assert found and all(f.evidence["born_in"] == "" for f in found)
    assert "its inputs were finite" not in found[-1].cause


# ---- live ---------------------------------------------------------------------------------------
class LogProbs(torch.nn.Module):
    """A head meant to return log-probabilities that forgot its softmax: log of a Linear's
    output. log's backward (1/x) stays finite, so the parameters do too and the NaN recurs."""

    def __init__(self) -> None:
        super().__init__()
        self.out = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(self.out(x))  # LOG_IN_MODEL


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.head = LogProbs()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(x)))


def _line(marker: str) -> int:
    lines = inspect.getsource(inspect.getmodule(_line)).splitlines()  # type: ignore[arg-type]
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(marker))


def _train(style: str, nan_data: bool = False) -> dict:
    from traindoc.live.probes import Probes
    from traindoc.live.session import Session

    torch.manual_seed(0)
    session = Session(level="standard", select=["nonfinite"])
    session.start("test", [])
    probes = Probes(session)
    probes.install()
    try:
        model = Net() if style == "model" else torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(6):
            x = torch.randn(16, 4)
            if nan_data:
                x[3, 1] = float("nan")
            y = torch.randint(0, 2, (16,))
            if style == "model":
                loss = torch.nn.functional.nll_loss(model(x), y)
            else:  # probabilities taken from raw outputs, in the loop
                probs = model(x)
                loss = -torch.log(probs.gather(1, y[:, None])).mean()  # LOG_IN_LOOP
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        probes.uninstall()
    found = [f for f in session.finish().findings if f.id == "nonfinite"]
    assert found and found[0].step == 0
    return found[0].evidence


def test_a_log_in_the_loop_is_named_with_its_line() -> None:
    ev = _train("loop")
    assert ev["born_in"] == f"log (tests/test_nonfinite_origin.py:{_line('LOG_IN_LOOP')})"


def test_a_log_inside_the_model_is_named_with_its_module() -> None:
    ev = _train("model")
    assert ev["born_in"] == f"log (tests/test_nonfinite_origin.py:{_line('LOG_IN_MODEL')}) in module head"


def test_nan_from_the_data_has_no_birth_to_name() -> None:
    assert _train("loop", nan_data=True)["born_in"] == ""
    assert _train("model", nan_data=True)["born_in"] == ""
