"""masked-nonfinite: the model output NaN but the value handed to backward is finite."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Iterator, Mapping

from traindoc.detectors import _carry
from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import Head
from traindoc.events import REPLACED, Activation, Backward, Event
from traindoc.findings import Finding


# What carries over a resume (Engine.state_dict): the non-finite outputs of the steps not yet
# past, and the masked steps (how many, the first 20).
_CARRIED = ("_nan_out", "_first_module", "_checked", "_at", "_masked")


class MaskedNonfinite:
    """On a sampled step the model's output held NaN, yet backward() got a finite value: a guard
    (``if isnan(loss): loss = 1.0``, ``nan_to_num``, try/except) hides the failure and the step
    trains on nothing. Only the model's *output* counts, so NaN that the model itself handles
    internally (fully masked attention rows) does not fire.
    """

    id: ClassVar[str] = "masked-nonfinite"
    needs: ClassVar[frozenset[str]] = frozenset({"activations", "backward"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("demo_scripts/nan_masked_loss.py", 0),
        Example("golden/masked_nan.jsonl", 3),
        Example("golden/healthy_noisy_loss.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        pass

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        # Steps whose output (_nan_out) or an inner module (_first_module) held NaN, and the
        # steps checked: only those not yet passed (backward() comes in step order), and the
        # first masked step's, are kept.
        self._nan_out: dict[int, str] = {}
        self._first_module: dict[int, str] = {}
        self._checked: set[int] = set()
        self._at: int | None = None  # the step of the latest backward()
        self._masked: Head[tuple[int, float, str]] = Head(20)  # (step, value, call site)

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``_CARRIED``)."""
        return _carry.save(self, _CARRIED)

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        _carry.load(self, state, _CARRIED)

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Activation):
            if event.nan and event.is_output:
                # The model's output, or a value the loss code replaced (the live masking
                # probe names the call: "nan_to_num at train.py:57").
                replaced = event.type == REPLACED
                self._nan_out[event.step] = f"{'`' if replaced else 'module `'}{event.module}`"
            elif event.nan:
                self._first_module.setdefault(event.step, event.module)
            return
        assert isinstance(event, Backward)
        if event.step != self._at:
            self._at = event.step
            self._forget_before(event.step)
        if event.step in self._checked or event.step not in self._nan_out:
            return
        self._checked.add(event.step)
        if math.isfinite(event.value):
            self._masked.append((event.step, event.value, event.where))
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        return iter(())

    def _forget_before(self, step: int) -> None:
        """backward() reached ``step``: earlier steps cannot be checked any more."""
        keep = self._masked.items[0][0] if self._masked.items else None  # its module is quoted
        for held in (self._nan_out, self._first_module):
            for s in [s for s in held if s < step and s != keep]:
                del held[s]
        self._checked = {s for s in self._checked if s >= step}

    def _finding(self) -> Finding:
        step, value, where = self._masked.items[0]
        out = self._nan_out.get(step, "")
        inner = self._first_module.get(step)
        module = f"module `{inner}`" if inner else out
        what = (f"non-finite values requiring grad were replaced by {out} before the loss"
                if not out.startswith("module") else f"the model output contained NaN (first in {module})")
        sites = [where] if where else []
        return finding(
            self.id, step=step,
            message=(
                f"at step {step} {what}, but the value handed to backward() was finite ({fmt(value)}); seen on "
                f"{self._masked.count} sampled step(s) {[s for s, _, _ in self._masked.items[:10]]}."
            ),
            fix=(
                "Remove the guard and let the NaN surface, then fix its source"
                + (f" (the NaN first appears in {module})" if module else "")
                + ": check the batch for NaN/Inf inputs, guard the op's domain, lower the LR. To "
                "skip truly bad batches, skip the optimizer step and count the skips instead."
            ),
            evidence={"masked_steps": self._masked.count, "steps": [s for s, _, _ in self._masked.items],
                      "value_to_backward": value, "module": module},
            where=[module.replace("`", "")] + sites if module else sites,
        )
