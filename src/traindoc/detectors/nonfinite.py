"""nonfinite: NaN or Inf in the loss, a gradient or a parameter."""

from __future__ import annotations

import math
from typing import Iterable, Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, names
from traindoc.events import (
    SKIPPED_BY_SCALER, Activation, Event, ParamStats, RunStart, Scalar, Series, StepEnd, scalars,
)
from traindoc.events.steps import LOSS_ORIGIN
from traindoc.findings import Finding


class Nonfinite(Detector):
    """The first step where the loss, the gradient norm, a gradient or a parameter is NaN/Inf.

    The evidence names where it appeared: the first module whose forward output held NaN on
    that step (forward), and the parameters whose gradient or value is non-finite (backward).
    Live, a non-finite loss is traced to its birth on a later sampled step whose loss is
    non-finite again: the op that made NaN or Inf out of finite inputs, and its file and line;
    the finding is then refined with it.

    On a live stream a step's verdict waits until the stream has moved past that step: an
    Inf/NaN gradient on a step that an AMP GradScaler skipped (a ``StepEnd`` with that outcome
    follows the step's measurements) is the scaler doing its job (every fp16 run has such
    steps), not a failure; a scale that keeps collapsing is ``grad-scaler-collapse``'s to judge.
    """

    id = "nonfinite"
    needs = frozenset()  # any one of its uses: a loss, grads, params
    uses = frozenset({"loss", "params", "activations", "grad_norm", "run", "step_skipped"})
    examples = (
        Example("zoo/nonfinite_grad.py", 2),
        Example("golden/nonfinite_loss.jsonl", 12),
        Example("ckpt/golden/nonfinite_param.jsonl", -1),
        Example("golden/healthy_noisy_loss.jsonl", None),
        Example("fixtures/logs/hf/nan_hidden", 24),
        Example("fixtures/logs/csv/healthy.csv", None),
    )

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        self._step: int | None = None
        self._what: list[str] = []
        # Per step, the first module whose forward output held NaN: only for the steps whose
        # verdict may still come (see _forget), not one entry per step of a long NaN run.
        self._module: dict[int, str] = {}  # a loss function's name ends in "()"
        self._empty: set[int] = set()  # steps whose first NaN module had an empty input
        self._latest: int | None = None  # the latest step the stream reached
        self._grads: list[str] = []
        self._params: list[str] = []
        self._loss: float | None = None
        self._lifecycle = False  # the stream says which steps were skipped (live)
        self._held: Finding | None = None  # a step's verdict, until the stream moves past it
        self._born: tuple[str, str, str, int] | None = None  # the loss's NaN: op, file:line, module, step

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, RunStart):
            self._lifecycle = event.source == "live"
            return
        if isinstance(event, StepEnd):
            self._step_ended(event)
            return
        step = getattr(event, "step", None)
        if isinstance(step, int) and (self._latest is None or step > self._latest):
            self._latest = step
        yield from self._release(step if isinstance(step, int) else None)
        yield from self._hold(self._observe(event))

    def _release(self, step: int | None) -> list[Finding]:
        """The stream reached ``step``: a verdict held for an earlier step stands."""
        held = self._held
        if held is None or step is None or held.step is None or step <= held.step:
            return []
        self._held = None
        return [held]

    def _hold(self, found: Iterable[Finding]) -> list[Finding]:
        """Without a lifecycle, findings go out at once; with one, the last (fullest) finding
        of the step waits for the step's end."""
        found = list(found)
        if not self._lifecycle or not found:
            return found
        self._held = found[-1]
        return []

    def _step_ended(self, end: StepEnd) -> None:
        held = self._held
        if held is not None and held.step == end.step and end.outcome == SKIPPED_BY_SCALER:
            self._held = None  # the scaler skipped that step: start over
            self._step, self._what, self._grads, self._params, self._loss = None, [], [], [], None

    def _observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Activation):
            if event.type.startswith(LOSS_ORIGIN):
                if self._born is None:
                    op, _, site = event.type[len(LOSS_ORIGIN):].strip().partition(" at ")
                    self._born = (op, site, event.module, event.step)
                    if self._step is not None:  # found on a later step: the finding is refined
                        yield from self._fire(self._step, self._what[0])
                return
            if event.nan and not event.is_output and event.step not in self._module:
                self._module[event.step] = event.module + ("()" if event.type == "function" else "")
                if event.empty:
                    self._empty.add(event.step)
                self._forget()
            return
        if isinstance(event, ParamStats):
            bad_grad = event.grad is not None and not math.isfinite(event.grad)
            bad_param = not math.isfinite(event.norm) and event.optimizer >= 0
            if not (bad_grad or bad_param):
                return
            if self._step is None or event.step == self._step:
                if bad_grad and event.name not in self._grads:
                    self._grads.append(event.name)
                if bad_param and event.name not in self._params:
                    self._params.append(event.name)
                yield from self._fire(event.step, "gradient" if bad_grad else "parameter")
            return
        assert isinstance(event, Scalar)
        if math.isfinite(event.value):
            return
        if self._step is None or event.step == self._step:
            if event.name == "loss":
                self._loss = event.value
            yield from self._fire(event.step, event.name)

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The columns at once, judged by the same per-point judgement as ``observe``: numpy
        picks the non-finite points (a finite point changes nothing), and only those are
        judged, in the order the engine would replay the columns."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        last = max((int(c.steps[-1]) for c in columns.values() if len(c)), default=None)
        if last is not None and (self._latest is None or last > self._latest):
            self._latest = last
        released = self._release(last)
        bad = {name: np.flatnonzero(~np.isfinite(vec.floats(c.values))) for name, c in columns.items()}
        firsts = [int(c.steps[int(bad[name][0])]) for name, c in columns.items() if len(bad[name])]
        if not firsts:
            return released
        # Only one step can be judged: the first non-finite one (or the one already found);
        # the judgement ignores every other point, so a million NaN rows cost nothing.
        target = self._step if self._step is not None else min(firsts)
        picked = []
        for name, c in columns.items():
            steps = vec.ints(c.steps)[bad[name]]
            idx = bad[name][steps == target].tolist()
            if idx:
                picked.append(Series(name, [target] * len(idx), [float(c.values[i]) for i in idx]))
        found = [f for event in scalars(picked) for f in self._observe(event)]
        return released + self._hold(found)

    def _forget(self) -> None:
        """Keep ``_module`` only for the steps from the earliest one still undecided: the step
        found, while its verdict is held (a later one may follow if the scaler skipped it), or
        that step alone once it stands; with none found, the step the stream is at (it comes in
        step order)."""
        if self._step is not None:
            floor, later = self._step, self._held is not None
        elif self._latest is not None:
            floor, later = self._latest, True
        else:
            return
        self._module = {s: m for s, m in self._module.items() if s == floor or (later and s > floor)}
        self._empty &= set(self._module)

    def finish(self) -> Iterator[Finding]:
        if self._held is not None:  # a last step that never ended (the run stopped in it)
            yield self._held

    def _fire(self, step: int, what: str) -> Iterator[Finding]:
        if self._step is None:
            self._step = step
        if what not in self._what:
            # In name order: two signals of one step come in either order (a log's columns
            # whole, or the live stream's points), and the report must not depend on it.
            self._what = sorted([*self._what, what])
        module = self._module.get(step)
        empty = module is not None and step in self._empty
        what = "" if module is None else f"`{module}`" if module.endswith("()") else f"module `{module}`"
        where = ([what.replace("`", "")] if module else []) + self._grads[:5] + self._params[:5]
        parts = []
        if self._loss is not None:
            parts.append(f"the loss is {self._loss}")
        if module:
            on_empty = " on an input with no element (0 rows): a mean over nothing is NaN"
            parts.append(f"{what} output NaN in the forward pass" + (on_empty if empty else ""))
        if self._grads:
            parts.append(f"{len(self._grads)} parameter(s) have non-finite gradients ({names(self._grads, 3)})")
        if self._params:
            parts.append(f"{len(self._params)} parameter(s) are non-finite ({names(self._params, 3)})")
        if not parts:
            parts.append(f"the {', '.join(self._what)} is non-finite")
        born = ""
        if self._born is not None:
            op, site, in_module, at = self._born
            born = f"`{op}` ({site})" + (f" in module `{in_module}`" if in_module else "")
            parts.append(f"{'on' if at == self._step else f'traced on step {at}, where it was again'} "
                         f"non-finite, the loss's NaN/Inf was made by {born} from finite inputs")
            where = [site, *where]
        yield finding(
            self.id, step=self._step,
            message=f"first non-finite value at step {self._step}: " + "; ".join(parts) + ".",
            cause=(
                f"`{module}` was given an empty batch: the index or mask that selects its rows "
                "selected none (a split or slice past the end of the data, a filter that matched "
                "nothing), and the mean of no elements is NaN." if empty else
                f"{born} was given values outside its domain (log or sqrt of a negative or of 0, a "
                "division by 0, an exp that overflows): its inputs were finite, its output was not."
                if born else
                "An op outside its domain (log/sqrt/div of 0 or a negative, exp overflow), an LR "
                "too high, fp16 overflow, or bad input data."
                + (f" The forward pass first produced NaN in `{module}`." if module else "")
            ),
            fix=(
                "Print the size of the selection handed to the loss and check the split or filter "
                "that makes it against the data's length; a loss over a batch that can be empty "
                "needs a guard (skip the step when it holds no row)." if empty else
                f"Look at what feeds {born}: a model that returns logits where probabilities are "
                "expected, a missing activation (softplus, sigmoid) before a log or a division, a "
                "variance of one element. Keep its input in the domain (clamp_min before log/sqrt, "
                "an eps in denominators) rather than masking the NaN afterwards." if born else None
            ),
            evidence={"signals": list(self._what), "module": module or "", "empty_input": empty,
                      "loss": self._loss, "born_in": born.replace("`", ""),
                      "nonfinite_grads": self._grads[:20], "nonfinite_params": self._params[:20]},
            where=where,
        )
