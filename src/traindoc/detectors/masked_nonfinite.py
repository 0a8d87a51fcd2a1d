"""masked-nonfinite: a NaN or Inf made on the way to the loss is replaced, and the value handed
to backward is finite."""

from __future__ import annotations

import math
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import Head
from traindoc.events import REPLACED, Activation, Backward, Event
from traindoc.events.steps import ORIGIN, REPLACED_INSIDE
from traindoc.findings import Finding


INSIDE, OUTSIDE = "inside", "outside"


class MaskedNonfinite(Detector):
    """On a sampled step non-finite values were hidden, yet backward() got a finite value: a
    guard (``if isnan(loss): loss = 1.0``, ``nan_to_num``, ``torch.where(torch.isnan(x), 0,
    x)``, ``masked_fill``, try/except) hides the failure and those values train nothing.

    Two places count. The model's *output* held NaN, or the loss code replaced non-finite values
    that require grad: that fires at once. A guard *inside* a model's forward (a per-layer
    log-determinant through ``nan_to_num`` in a normalizing flow, an intermediate
    ``torch.where(torch.isnan(x), 0, x)``) fires only when the replaced values have a numerical
    origin: an op among their autograd ancestors (``log``, ``sqrt``, a division, ``exp``,
    ``pow``, ``std`` ...) made a non-finite value out of finite inputs on that step. Models
    replace NaN on purpose too: a fully masked attention row is NaN because the mask put
    ``-inf`` in every score, a value that was never finite, so it has no such origin and stays
    quiet. The origin is looked for on the sampled steps after a guard first replaced something
    (live), so a guard inside the model fires from the second sampled step it is seen on; the
    finding names the op, the user's module that ran it and its line, and where the values were
    replaced.
    """

    id = "masked-nonfinite"
    needs = frozenset({"activations", "backward"})
    examples = (
        Example("demo_scripts/nan_masked_loss.py", 0),
        Example("zoo/flow_logdet_nan_to_num.py", 0),
        Example("zoo/hetero_where_isnan.py", 1),
        Example("golden/masked_nan.jsonl", 3),
        Example("golden/healthy_noisy_loss.jsonl", None),
        Example("zoo/healthy_flow_logdet_guard.py", None),
        Example("zoo/healthy_hetero_softplus.py", None),
        Example("zoo/healthy_padded_attention_nan_guard.py", None),
    )

    # Carried over a resume: the non-finite outputs and guards of the steps not yet past, the
    # origins found, and the masked steps (how many, the first 20).
    carry = ("_nan_out", "_first_module", "_inside", "_born", "_born_module", "_first_born",
                "_checked", "_at", "_masked")

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        # Per step, only for steps not yet passed (backward() comes in step order) and the first
        # masked step's: the output held NaN or the loss code replaced values (_nan_out), an
        # inner module's output held NaN (_first_module), a guard inside the forward replaced
        # values (_inside), and where they were born (_born: "log at flow.py:40"; _born_module).
        self._nan_out: dict[int, str] = {}
        self._first_module: dict[int, str] = {}
        self._inside: dict[int, str] = {}
        self._born: dict[int, str] = {}
        self._born_module: dict[int, str] = {}
        self._first_born: list[str] = []  # the first origin found: [op at site, module, step]
        self._checked: set[int] = set()
        self._at: int | None = None  # the step of the latest backward()
        self._masked: Head[tuple[int, float, str, str]] = Head(20)  # (step, value, call site, where)

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Activation):
            self._activation(event)
            return
        assert isinstance(event, Backward)
        if event.step != self._at:
            self._at = event.step
            self._forget_before(event.step)
        step = event.step
        if step in self._checked:
            return
        place = OUTSIDE if step in self._nan_out else INSIDE if step in self._inside and step in self._born else ""
        if not place:
            return
        self._checked.add(step)
        if math.isfinite(event.value):
            self._masked.append((step, event.value, event.where, place))
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._masked.items and self._first_born and self._masked.items[0][0] not in self._born:
            yield self._finding()  # the origin was found after the first masked step

    def _activation(self, event: Activation) -> None:
        step = event.step
        if event.type.startswith(ORIGIN):
            self._born.setdefault(step, event.type[len(ORIGIN):].strip())
            self._born_module.setdefault(step, event.module)
            if not self._first_born:
                self._first_born = [self._born[step], self._born_module[step], str(step)]
        elif event.type == REPLACED_INSIDE:
            self._inside.setdefault(step, event.module)
        elif event.nan and event.is_output:
            # The model's output, or a value the loss code replaced (the live masking probe
            # names the call: "nan_to_num at train.py:57").
            replaced = event.type == REPLACED
            self._nan_out.setdefault(step, f"{'`' if replaced else 'module `'}{event.module}`")
        elif event.nan:
            self._first_module.setdefault(step, event.module)

    def _forget_before(self, step: int) -> None:
        """backward() reached ``step``: earlier steps cannot be checked any more."""
        keep = self._masked.items[0][0] if self._masked.items else None  # its module is quoted
        for held in (self._nan_out, self._first_module, self._inside, self._born, self._born_module):
            for s in [s for s in held if s < step and s != keep]:
                del held[s]
        self._checked = {s for s in self._checked if s >= step}

    def _finding(self) -> Finding:
        step, value, where, place = self._masked.items[0]
        born = self._born.get(step) or (self._first_born[0] if self._first_born else "")
        born_module = self._born_module.get(step) or (self._first_born[1] if self._first_born else "")
        op, _, born_at = born.partition(" at ")
        origin = ""
        if born:
            origin = (f"; the first non-finite value was made by `{op}`"
                      + (f" in module `{born_module}`" if born_module else "") + f" ({born_at}) from finite inputs"
                      + ("" if step in self._born else f" (found at step {self._first_born[2]})"))
        if place == INSIDE:
            guard = self._inside.get(step, "")
            what = f"non-finite values requiring grad were replaced by `{guard}` inside the model's forward"
            module, sites = (f"module `{born_module}`" if born_module else ""), [guard.partition(" at ")[2]]
        else:
            out = self._nan_out.get(step, "")
            inner = self._first_module.get(step)
            module = f"module `{inner}`" if inner else (f"module `{born_module}`" if born_module else out)
            what = (f"non-finite values requiring grad were replaced by {out} before the loss"
                    if not out.startswith("module") else f"the model output contained NaN (first in {module})")
            sites = [out.strip("`").partition(" at ")[2]] if not out.startswith("module") else []
        if where:
            sites.append(where)
        if born_at:
            sites.append(born_at)
        source = (f"`{op}` in {module} ({born_at})" if born and module.startswith("module")
                  else f"`{op}` ({born_at})" if born else module)
        places = [module.replace("`", "")] if module.startswith("module") else []
        return finding(
            self.id, step=step,
            message=(
                f"at step {step} {what}{origin}, but the value handed to backward() was finite ({fmt(value)}); "
                f"seen on {self._masked.count} sampled step(s) {[s for s, _, _, _ in self._masked.items[:10]]}."
            ),
            fix=(
                "Remove the guard and let the NaN surface, then fix its source"
                + (f" (the NaN first appears in {source})" if source else "")
                + ": keep the op's input in its domain (a softplus or exp parameterisation, a clamp, an "
                "epsilon), check the batch for NaN/Inf inputs, lower the LR. To skip truly bad batches, "
                "skip the optimizer step and count the skips instead."
            ),
            evidence={"masked_steps": self._masked.count, "steps": [s for s, _, _, _ in self._masked.items],
                      "value_to_backward": value, "module": module, "guard": place,
                      "born_in": op, "born_at": born_at, "born_module": born_module},
            where=places + [s for s in dict.fromkeys(sites) if s],
        )
