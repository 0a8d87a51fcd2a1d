"""saturated-outputs: the model's outputs barely depend on the input."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterator, Mapping

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import LOSS_INPUT, Activation, Event
from traindoc.findings import Finding


class SaturatedOutputs(Detector):
    """On most sampled steps an output hardly varies across the batch: probabilities (values in
    [0, 1]) with a spread below ``spread`` (e.g. all about 0.5), or any output whose spread
    across the batch is below ``relative`` of its overall spread. Judged over the run, for each
    output on its own: the model's output, and the probabilities a BCE loss sees (the sigmoid of
    the logits handed to ``binary_cross_entropy_with_logits``, or ``binary_cross_entropy``'s
    input), wherever the squashing happens."""

    id = "saturated-outputs"
    needs = frozenset({"activations"})
    examples = (
        Example("zoo/saturated_dag_scale.py", 0),
        Example("zoo/healthy_mlp.py", None),
    )

    # Carried over a resume: each output's counts and recent spreads (deques of 64), and which one
    # fired.
    carry = ("_outputs",)

    @dataclass(frozen=True)
    class Config:
        spread: float = 0.01
        relative: float = 0.01
        share: float = 0.8  # of sampled steps
        min_steps: int = 10

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._outputs: dict[str, _Output] = {}  # one per output: the model's, the loss's input
        self._fired: _Output | None = None

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``carry``; the output that fired by its name)."""
        fired = self._fired.module if self._fired is not None else None
        return {**super().state_dict(), "fired": fired}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        state = dict(state)
        fired = state.pop("fired")
        super().load_state_dict(state)
        self._fired = self._outputs[str(fired)] if fired is not None else None

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, Activation)
        if not event.is_output or event.spread is None or event.spread != event.spread:
            return
        out = self._outputs.get(event.module)
        if out is None:
            what = (f"the probabilities `{event.module}` sees" if event.type == LOSS_INPUT
                    else f"the output of `{event.module}`")
            out = self._outputs[event.module] = _Output(event.module, what)
        out.seen += 1
        if self._saturated(event):
            out.add(event)
        cfg = self.config
        if self._fired is None and out.seen >= 2 * cfg.min_steps and out.saturated == out.seen:
            self._fired = out
            yield self._finding(out)

    def finish(self) -> Iterator[Finding]:
        cfg = self.config
        if self._fired is not None:
            yield self._finding(self._fired)
            return
        for out in self._outputs.values():
            if out.seen >= cfg.min_steps and out.saturated >= cfg.share * out.seen:
                yield self._finding(out)
                return

    def _saturated(self, a: Activation) -> bool:
        cfg = self.config
        assert a.spread is not None
        bounded = a.lo is not None and a.hi is not None and a.lo >= 0.0 and a.hi <= 1.0
        if bounded and a.spread < cfg.spread:
            return True
        return a.scale is not None and (a.scale == 0 or a.spread < cfg.relative * a.scale)

    def _finding(self, out: _Output) -> Finding:
        lo, hi = median(list(out.lo)), median(list(out.hi))
        spread = median(list(out.spreads))
        return finding(
            self.id, step=out.first,
            message=(
                f"{out.what} {'vary' if out.what.startswith('the probabilities') else 'varies'} across the batch by a median {fmt(spread)} (std over "
                f"inputs; threshold {fmt(self.config.spread)}) on {out.saturated} of {out.seen} "
                f"sampled steps; its values sit in [{fmt(lo)}, {fmt(hi)}]."
            ),
            evidence={"module": out.module, "median_spread": spread, "low": lo, "high": hi,
                      "saturated_steps": out.saturated, "sampled_steps": out.seen},
            where=[out.module],
        )


class _Output:
    """One output's tally; the spreads and ranges of its last 64 saturated steps."""

    def __init__(self, module: str, what: str) -> None:
        self.module = module
        self.what = what
        self.seen = 0
        self.saturated = 0
        self.first: int | None = None
        self.spreads: deque[float] = deque(maxlen=64)
        self.lo: deque[float] = deque(maxlen=64)
        self.hi: deque[float] = deque(maxlen=64)

    def add(self, a: Activation) -> None:
        self.saturated += 1
        if self.first is None:
            self.first = a.step
        self.spreads.append(a.spread if a.spread is not None else 0.0)
        if a.lo is not None and a.hi is not None:
            self.lo.append(a.lo)
            self.hi.append(a.hi)
