"""no-gradient on hand-made events: a gradient the script removes after backward (a warm-up
freeze, DINO's last layer, SwAV's prototypes) is judged at the end only and fires when it was
removed on every sampled step; a parameter that gets its first gradient after the finding
fired turns it into a note (it used to crash the detector at the end of the run)."""

from __future__ import annotations

from traindoc.detectors.no_gradient import NoGradient
from traindoc.events import ParamStats
from traindoc.findings import Finding


def _row(step: int, name: str, grad: float | None, cleared: bool = False) -> ParamStats:
    return ParamStats(step=step, name=name, dtype="torch.float32", numel=100, requires_grad=True,
                      norm=1.0, grad=grad, has_grad=grad is not None, cleared=cleared)


def _run(steps: list[list[ParamStats]]) -> tuple[list[Finding], list[Finding]]:
    """The findings made while the run went on, and those of its end."""
    det = NoGradient()
    during = [f for rows in steps for e in rows for f in det.observe(e)]
    return during, list(det.finish())


def _steps(head: object, n: int = 20) -> list[list[ParamStats]]:
    """``n`` sampled steps where the body learns and ``head(step)`` gives the head's row."""
    return [[_row(s, "body.weight", 0.5), head(s)] for s in range(n)]  # type: ignore[operator]


def test_cleared_on_every_step_fires_at_the_end_only() -> None:
    during, end = _run(_steps(lambda s: _row(s, "head.last_layer.weight", None, cleared=True)))
    assert during == []
    (found,) = end
    assert found.severity == "error" and found.step == 0
    assert found.evidence["cleared_by_script"] == ["head.last_layer.weight"]
    assert "p.grad = None" in found.message and "warm-up" in found.cause


def test_cleared_for_a_warm_up_then_trained_is_quiet() -> None:
    during, end = _run(_steps(lambda s: _row(s, "prototypes.weight", None, cleared=True) if s < 8
                              else _row(s, "prototypes.weight", 0.2)))
    assert during == [] and end == []


def test_none_for_a_while_then_a_gradient_is_a_note() -> None:
    during, end = _run(_steps(lambda s: _row(s, "aux.weight", None) if s < 8 else _row(s, "aux.weight", 0.2)))
    assert [f.severity for f in during] == ["error"]  # said while it ran: nothing showed otherwise yet
    (note,) = end
    assert note.severity == "info" and note.evidence["first_gradient_step"] == 8
    assert note.evidence["parameters"] == ["aux.weight"]


def test_never_a_gradient_still_fires_while_running() -> None:
    during, end = _run(_steps(lambda s: _row(s, "aux.weight", None)))
    assert [f.step for f in during] == [0] and [f.severity for f in end] == ["error"]
    assert end[0].evidence["cleared_by_script"] == []


def test_a_short_run_is_not_judged() -> None:
    during, end = _run(_steps(lambda s: _row(s, "head.weight", None, cleared=True), n=3))
    assert during == [] and end == []


def test_carried_over_a_resume() -> None:
    first, second = NoGradient(), NoGradient()
    steps = _steps(lambda s: _row(s, "head.weight", None, cleared=True))
    for rows in steps[:10]:
        for e in rows:
            list(first.observe(e))
    second.load_state_dict(first.state_dict())
    for rows in steps[10:]:
        for e in rows:
            list(second.observe(e))
    (found,) = list(second.finish())
    assert found.evidence["cleared_by_script"] == ["head.weight"] and found.step == 0
