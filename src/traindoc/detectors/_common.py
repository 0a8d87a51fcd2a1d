"""What every detector shares: building a finding from the catalog, and its examples.

A detector writes only what it measured: the message, the evidence, ``where``, and a cause or fix
when it can name the run's own objects or the branch it found. The failure itself (title, what
it is, causes, what to try) is described once, on its catalog page, and ``finding`` takes the
title, and the cause and fix a detector does not pass, from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traindoc.catalog import finding
from traindoc.events import Phase
from traindoc.findings import Finding, fmt

__all__ = ["Example", "finding", "fmt", "names", "new_phase", "phase_note", "require"]


@dataclass(frozen=True)
class Example:
    """A case a detector must get right, which is also its documentation.

    ``source`` is a zoo script (``zoo/<name>.py``, or ``demo_scripts/<name>.py`` for the three
    the package ships), a golden event stream (a ``.jsonl`` path
    under tests/, e.g. ``golden/loss_spike.jsonl``), or a real log under tests/fixtures/logs/
    (a CSV, a TensorBoard folder ...) read by ``traindoc logs`` with the options in ``argv``.
    ``fires_at`` is the step at which the detector must first fire, ``-1`` for "fires, step
    unknown", or None when it must stay quiet.
    """

    source: str
    fires_at: int | None
    argv: tuple[str, ...] = ()


def require(config: object, **ranges: str) -> None:
    """A Config's range checks, each written as its message writes it: ``require(self,
    confirm=">= 1", rate="(0, 1]")`` raises ``ValueError("rate must be in (0, 1], got 2")``
    for the first field out of its range, in the order given.

    A range is ``">= k"``, ``"> k"`` or an interval such as ``"(0, 1]"`` or ``"[0.5, 1)"``; a
    bound without a dot is an int, so a wrong type fails as ``x < 1`` did. NaN passes ``">= k"``
    and ``"> k"`` and fails an interval, as the checks written out did: a bound rejects when
    ``x < k`` (``x <= k``), an interval when ``not lo < x <= hi``. A check that must reject NaN
    against a bound (``not x > k``) stays written out.
    """
    for name, wanted in ranges.items():
        x = getattr(config, name)
        op, _, k = wanted.partition(" ")
        if op in (">=", ">"):
            bad = x < _number(k) if op == ">=" else x <= _number(k)
        else:
            lo, hi = (_number(b.strip()) for b in wanted[1:-1].split(","))
            bad = not ((lo < x if wanted[0] == "(" else lo <= x) and (x < hi if wanted[-1] == ")" else x <= hi))
        if bad:
            raise ValueError(f"{name} must be {'' if op in ('>=', '>') else 'in '}{wanted}, got {x}")


def _number(text: str) -> int | float:
    return float(text) if "." in text else int(text)


def site_and_layer(site: str, layer: str) -> list[str]:
    """``where`` of a finding read at the loss: the backward's file:line and the name of the
    parameter whose layer is at fault (``layer`` is "name [shape]", or "")."""
    return [w for w in (site, layer.split(" ")[0]) if w]


def names(items: list[str], limit: int = 5) -> str:
    """``a, b, c and 4 more``."""
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def new_phase(det: Any, phase: Phase) -> list[Finding]:
    """A new training phase (a new optimizer or model: a student after its teacher, fine-tuning
    after pretraining): the loss of one phase says nothing about the next. Returns the ended
    phase's final judgement (``finish``) and starts ``det`` over, remembering the phase for
    its messages (``phase_note``)."""
    done = list(det.finish() or ())
    det.__dict__.update(vars(type(det)(det.config)))
    det._phase = phase
    return done


def phase_note(det: Any) -> str:
    """" (phase N: why it began at step S)" for a detector judging a phase after the first."""
    phase: Phase | None = getattr(det, "_phase", None)
    if phase is None:
        return ""
    return f" (training phase {phase.index + 1}, from step {phase.step}: {phase.reason})"


# Optimizers that divide each update by a running size of the gradient: a constant factor on the
# gradients barely changes their step (matched as a prefix of the class name).
ADAPTIVE = ("Adam", "AdamW", "NAdam", "RAdam", "Adamax", "Adagrad", "RMSprop", "Adafactor", "Lion")


def is_adaptive(cls: str) -> bool:
    return cls.startswith(ADAPTIVE)
