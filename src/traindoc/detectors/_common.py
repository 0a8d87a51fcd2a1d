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

__all__ = ["Example", "finding", "fmt", "names", "new_phase", "phase_note"]


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
