"""bad-initial-loss: a classifier's first loss far above ln(C)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Iterator, Mapping

from traindoc.detectors import _carry
from traindoc.detectors._common import Example, finding, fmt
from traindoc.events import Classification, Event
from traindoc.findings import Finding


# What carries over a resume (Engine.state_dict): whether the first loss was judged already: a
# resumed run's first loss is not the initial one.
_CARRIED = ("_done",)


class BadInitialLoss:
    """The first cross-entropy of a fresh classifier should be about ln(C) (uniform predictions
    over C classes). Only a first loss far *above* it fires (a confidently wrong init); a loss
    below it is normal when training resumes or fine-tunes."""

    id: ClassVar[str] = "bad-initial-loss"
    needs: ClassVar[frozenset[str]] = frozenset({"classification"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("zoo/bad_init_scaled_head.py", 0),
        Example("zoo/healthy_mlp.py", None),
        Example("zoo/healthy_gpt.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        margin: float = 1.0  # absolute nats above ln(C) ...
        relative: float = 0.5  # ... or this share of ln(C), whichever is larger

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._done = False

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``_CARRIED``)."""
        return _carry.save(self, _CARRIED)

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        _carry.load(self, state, _CARRIED)

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, Classification)
        if self._done:
            return
        self._done = True
        if event.classes < 2 or event.step > 0:
            return
        expected = math.log(event.classes)
        limit = expected + max(self.config.margin, self.config.relative * expected)
        if event.value <= limit:
            return
        yield finding(
            self.id, step=event.step,
            message=(
                f"the first cross-entropy is {fmt(event.value)} for {event.classes} classes; a fresh "
                f"classifier should start near ln({event.classes}) = {fmt(expected)} (threshold "
                f"{fmt(limit)})."
            ),
            evidence={"loss": event.value, "classes": event.classes, "expected": expected, "threshold": limit},
        )

    def finish(self) -> Iterator[Finding]:
        return iter(())
