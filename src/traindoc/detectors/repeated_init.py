"""repeated-init: a deliberate parameter init overwritten by a later, blanket one."""

from __future__ import annotations

from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names
from traindoc.events import Event, InitOverwritten
from traindoc.findings import Finding


class RepeatedInit(Detector):
    """While the model was built, a parameter's last initialisation replaced the spread an
    earlier one had given it (std changed by more than 1.5x, or zero against non-zero), and
    that last init was a broader one than the init it overwrote: the code that ran it
    initialised more parameters (a blanket ``_init_weights`` applied to every Linear) than the
    overwritten one (a targeted, scaled init of the residual projections). The healthy order,
    blanket first and targeted last (nanoGPT's ``c_proj`` init after ``apply(_init_weights)``),
    is quiet."""

    id = "repeated-init"
    needs = frozenset({"init"})
    examples = (
        Example("zoo/repeated_init_post_init.py", 0),
        Example("zoo/healthy_scaled_init_last.py", None),
        Example("zoo/healthy_gpt.py", None),
        Example("zoo/healthy_nanogpt.py", None),
    )

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        self._hit: list[InitOverwritten] = []

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, InitOverwritten)
        if len(event.sites) < 2 or event.sites[-1] == event.sites[-2]:
            return
        if event.counts[-1] <= event.counts[-2]:
            return  # a targeted init after a blanket one: the healthy order
        self._hit.append(event)
        if len(self._hit) == 1:
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if len(self._hit) > 1:
            yield self._finding()  # final evidence: every parameter overwritten

    def _finding(self) -> Finding:
        e = self._hit[0]
        before, after = e.sites[-2], e.sites[-1]
        return finding(
            self.id, step=e.step,
            message=(
                f"{len(self._hit)} parameter(s) were initialised by {before} (std "
                f"{fmt(e.stds[-2])}, {e.counts[-2]} parameters) and then again by {after} (std "
                f"{fmt(e.stds[-1])}, {e.counts[-1]} parameters), which overwrote the first "
                f"init's spread: {names([h.name for h in self._hit], 4)}."
            ),
            cause=(f"The targeted init in {before} runs before a blanket one ({after}: a "
                   "`post_init()`/`apply(_init_weights)` that re-initialises every module), so "
                   "the scaled (or zero) init of these parameters is lost and they start with "
                   "the generic spread."),
            fix=(f"Run the targeted init after the blanket one (apply `_init_weights` first, then "
                 f"the special init of {e.name}), or make the blanket init skip parameters "
                 "already initialised (a flag such as `_is_hf_initialized`)."),
            evidence={"parameters": [h.name for h in self._hit[:30]], "sites": list(e.sites),
                      "stds": list(e.stds), "counts": list(e.counts)},
            where=[h.name for h in self._hit[:10]],
        )
