"""exploding-gradients: the gradient norm far outside the healthy range and not coming down."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

from traindoc.detectors._common import Example, finding, fmt, names
from traindoc.detectors._maths import finite, median
from traindoc.events import Event, ParamStats, Scalar, Series
from traindoc.findings import Finding


class ExplodingGradients:
    """The total gradient norm (before clipping) stays, for ``window`` consecutive measurements,
    above an absolute limit (thousands) or orders of magnitude above the run's own early level.
    The evidence names the parameters that hold most of the squared norm.
    """

    id: ClassVar[str] = "exploding-gradients"
    needs: ClassVar[frozenset[str]] = frozenset({"grad_norm"})
    uses: ClassVar[frozenset[str]] = frozenset({"params"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("zoo/exploding_acyclicity.py", 0),
        Example("zoo/divergence.py", -1),
        Example("golden/healthy_noisy_loss.jsonl", None),
        Example("fixtures/logs/seeds/seed001_grad_f1.csv", 0),
        Example("fixtures/logs/hf/healthy", None),
    )

    @dataclass(frozen=True)
    class Config:
        absolute: float = 1000.0  # a norm above this is far outside any healthy range
        relative: float = 100.0  # ... or this many times the run's early median
        window: int = 5
        early: int = 5

        def __post_init__(self) -> None:
            if self.window < 1 or self.early < 1:
                raise ValueError("window and early must be >= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._norms: list[tuple[int, float]] = []
        self._share: dict[str, float] = {}
        self._grad_sq: dict[str, float] = {}
        self._streak: list[int] = []
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, ParamStats):
            if event.grad is not None and event.grad == event.grad:
                self._grad_sq[event.name] = event.grad ** 2
            return
        assert isinstance(event, Scalar)
        if self._norms and self._norms[-1][0] == event.step:
            return  # one norm per step (a pre-clip norm wins: it comes first)
        self._norms.append((event.step, event.value))
        cfg = self.config
        early = median([v for _, v in self._norms[: cfg.early]])
        high = event.value >= cfg.absolute or (
            len(self._norms) > cfg.early and early > 0 and event.value >= cfg.relative * early)
        if not high:
            self._streak = []
        elif len(self._streak) < cfg.window:  # only its start and length matter
            self._streak.append(event.step)
        if high and self._grad_sq:
            total = sum(self._grad_sq.values()) or 1.0
            self._share = {k: v / total for k, v in self._grad_sq.items()}
        if not self._fired and len(self._streak) >= cfg.window:
            self._fired = True
            yield self._finding()

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The grad_norm column at once: one norm per step (the first), the early median, the
        runs of high norms; ``observe`` fires where a run first reaches ``window``."""
        from traindoc.detectors import _vector as vec

        return vec.judge(self, columns, {"grad_norm"}, self._observe_columns)

    def _observe_columns(self, columns: dict[str, Series]) -> list[Finding]:
        import numpy as np

        from traindoc.detectors import _vector as vec

        col = columns.get("grad_norm")
        if col is None or not len(col):
            return []
        cfg = self.config
        keep = np.flatnonzero(vec.first_of_step(vec.ints(col.steps)))  # a step's first norm
        norms = vec.floats(col.values)[keep]
        early = median(vec.items(col.values, keep[: cfg.early]))
        high = (norms >= cfg.absolute) | (
            (np.arange(len(norms)) >= cfg.early) & (early > 0) & (norms >= cfg.relative * early))
        run = vec.run_lengths(high)
        i = vec.first_true(run >= cfg.window)
        # observe holds every (step, norm) pair, which only its message reads: without a
        # finding, keep the early ones and the last, all a later observe needs besides (a
        # million pairs cost ~100 ms; a later finding's message would count only these).
        kept = keep if i is not None else np.append(keep[: cfg.early], keep[cfg.early:][-1:])
        self._norms = list(zip(vec.items(col.steps, kept), vec.items(col.values, kept)))
        out = []
        if i is not None:  # what observe yields then, with the state of that point
            self._fired = True
            full, self._norms = self._norms, self._norms[: i + 1]
            self._streak = [s for s, _ in self._norms[i + 1 - cfg.window:]]
            out.append(self._finding())
            self._norms = full
        # the streak observe holds at the end: the last run's first ``window`` steps
        start = len(norms) - int(run[-1])
        self._streak = vec.items(col.steps, keep[start: start + cfg.window])
        return out

    def finish(self) -> Iterator[Finding]:
        if self._fired:
            yield self._finding()

    def _finding(self) -> Finding:
        # All non-finite (a norm of inf at every step) is still a finding: show those values.
        vals = finite([v for _, v in self._norms]) or [v for _, v in self._norms]
        cfg = self.config
        top = sorted(self._share, key=lambda k: -self._share[k])[:5]
        dominant = ", ".join(f"{k} ({self._share[k]:.0%})" for k in top)
        first = self._streak[0] if self._streak else self._norms[0][0]
        return finding(
            self.id, step=first,
            message=(
                f"gradient norm {fmt(vals[0])} at the first step, median {fmt(median(vals))}, max "
                f"{fmt(max(vals))}, last {fmt(vals[-1])} over {len(vals)} measured steps; above "
                f"{fmt(cfg.absolute)} (or {fmt(cfg.relative)}x the early median "
                f"{fmt(median(vals[: cfg.early]))}) for {cfg.window}+ consecutive measurements"
                + (f". Most of the norm is in {dominant}." if top else ".")
            ),
            cause=(
                "A loss term with a steep landscape or a large weight (matrix powers, exponentials, "
                "an unnormalized penalty), an LR too high, unnormalized inputs/targets, or a "
                "missing normalization layer."
                + (f" The parameters behind the norm: {names(top, 3)}." if top else "")
            ),
            fix=(
                "Find the term that produces it (the dominant parameters above point to it): "
                "normalize or reweight that term, scale inputs and targets to unit range, lower the "
                "LR. Clipping hides the size but the direction stays dominated by that term."
            ),
            evidence={"first": vals[0], "median": median(vals), "max": max(vals), "last": vals[-1],
                      "measured_steps": len(vals), "threshold_absolute": cfg.absolute,
                      "threshold_relative": cfg.relative,
                      "dominant": {k: self._share[k] for k in top}},
            where=top,
        )
