"""exploding-gradients: the gradient norm far outside the healthy range and not coming down."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names
from traindoc.detectors._maths import Thinned, median
from traindoc.events import Clip, Event, ParamStats, Series
from traindoc.findings import Finding

if TYPE_CHECKING:  # numpy is imported where a column is judged: the live face starts without it
    import numpy as np


class ExplodingGradients(Detector):
    """The total gradient norm (before clipping; one per step, the step's first) stays, for
    ``window`` consecutive measurements, orders of magnitude above a reference taken from the
    run itself. A norm has no scale of its own, so the reference is what the source offers:

    - The parameter norm, where the source measures it (live: the parameters on sampled
      steps): a gradient ``params`` (100) times the norm of the weights it updates means one
      SGD step at an LR of 1/``params`` replaces the weights. This catches a norm that is huge
      from the first step, where the run's early level is no reference. On the 55 zoo runs the
      ratio is at most 2.4 in the healthy ones and 40 where one loss term dominates
      (loss-term-imbalance); the exploding ones measure 340 to 88,000 (zoo/divergence.py: 6.0e4
      against weights of 6.1 at step 0).
    - The run's early level (the median of its first ``early`` norms): ``relative`` (100)
      times it is a norm that grew by two orders of magnitude, at any scale.
    - A log of the norm alone has neither for a norm that is huge from its first step, and its
      later level or its loss cannot stand in: seed 001's norm (5.2e4 at the first epoch)
      falls 8.5x by the last, as a healthy run's falls after its first steps, and its
      norm/loss ratio (3) is one healthy zoo runs show too (up to 7.8). Such a log is compared
      with the scale a normalized model's gradient has (a mean-reduced loss of normalized
      inputs at a standard init): healthy zoo runs 0.05-4.6, and ``unscaled`` (1000) is 200x
      the largest. A log that recorded the parameter norm would not need it.

    The evidence names the parameters that hold most of the squared norm. Judged on columns
    (``observe_series``): a log's column whole, live Scalars in the small columns the engine
    delivers; the same findings however a column is cut.
    """

    id = "exploding-gradients"
    needs = frozenset({"grad_norm"})
    uses = frozenset({"params", "clip"})
    examples = (
        Example("zoo/exploding_acyclicity.py", 0),
        Example("zoo/divergence.py", -1),
        Example("golden/healthy_noisy_loss.jsonl", None),
        Example("zoo/healthy_vae_sum_loss.py", None),
        Example("zoo/healthy_sum_mse_sgd.py", None),
        Example("fixtures/logs/seeds/seed001_grad_f1.csv", 0),
        Example("fixtures/logs/hf/healthy", None),
    )

    # Carried over a resume: the first norms (the growth reference), the running streak, the median
    # sample and the latest per-parameter measurements.
    carry = ("_grad_sq", "_param_sq", "_step_sq", "_clipped", "_share", "_early", "_last_step", "_n", "_first",
                "_top", "_last", "_sample", "_streak", "_streak_start", "_fired", "_reference")

    @dataclass(frozen=True)
    class Config:
        # Each a ratio to a reference from the run (the class docstring says why these).
        params: float = 100.0  # x the parameter norm, where measured (healthy zoo runs: <= 2.4)
        relative: float = 100.0  # x the median of the first ``early`` norms (growth)
        unscaled: float = 1000.0  # no parameter norm (a log): x the ~1 of a normalized model's norm
        update: float = 0.1  # relative update at or below which a norm above the parameter
        #                      reference is the loss's scale (sum-reduced), unless clipped
        window: int = 5
        early: int = 5

        def __post_init__(self) -> None:
            if self.window < 1 or self.early < 1:
                raise ValueError("window and early must be >= 1")
            if min(self.params, self.relative, self.unscaled, self.update) <= 0:
                raise ValueError("params, relative, unscaled and update must be > 0")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._grad_sq: dict[str, float] = {}  # per parameter, its latest measurement
        self._param_sq: dict[str, float] = {}
        self._step_sq: dict[str, float] = {}  # per parameter, its latest squared update ||dw||^2
        self._clipped = False  # a clip rescaled a gradient (the update then says nothing of its size)
        self._share: dict[str, float] = {}
        self._early: list[float] = []  # the first ``early`` norms
        self._last_step: int | None = None
        self._n = 0  # norms measured
        self._first = math.nan
        self._top = -math.inf  # the largest (NaN aside)
        self._last = math.nan
        self._sample = Thinned()  # for the median
        self._streak = 0  # consecutive high norms up to the last one ...
        self._streak_start = 0  # ... from this step
        self._fired: int | None = None  # the step where the streak that fired began
        self._reference = ("", math.nan)  # what the norm was compared with where it fired

    def observe(self, event: Event) -> list[Finding]:
        if isinstance(event, ParamStats):
            if event.grad is not None and math.isfinite(event.grad):
                self._grad_sq[event.name] = event.grad ** 2
            if math.isfinite(event.norm):
                self._param_sq[event.name] = event.norm ** 2
                if event.update is not None and math.isfinite(event.update):
                    self._step_sq[event.name] = (event.update * event.norm) ** 2
            return []
        assert isinstance(event, Clip)  # its numbers come as columns
        self._clipped = self._clipped or event.norm > event.max_norm
        return []

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The next points of the grad_norm column: one norm per step, each judged against the
        references known now (the parameter norm of the latest sampled step), the streaks
        carried over from the call before."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        col = columns.get("grad_norm")
        if col is None or not len(col):
            return []
        cfg = self.config
        steps = vec.ints(col.steps)
        first = vec.first_of_step(steps)  # a step's first norm (a pre-clip norm comes first)
        first[0] = steps[0] != self._last_step
        keep = np.flatnonzero(first)
        self._last_step = int(steps[-1])
        if not len(keep):
            return []
        norms = vec.floats(col.values)[keep]
        self._early += vec.items(col.values, keep[: cfg.early - len(self._early)])
        early = median(self._early) if len(self._early) == cfg.early else math.nan
        weights = math.sqrt(sum(self._param_sq.values()))
        # The update the latest sampled step produced, relative to the weights (NaN: unmeasured).
        moved = math.sqrt(sum(self._step_sq.values())) / weights if weights > 0 and self._step_sq else math.nan
        calm = not self._clipped and moved <= cfg.update
        with np.errstate(all="ignore"):  # NaN compares False; values near the float limit overflow
            grown = (self._n + np.arange(len(norms)) >= cfg.early) & (early > 0) & (
                norms >= cfg.relative * early)
            scaled = (norms >= (cfg.params * weights if weights > 0 else cfg.unscaled)) & (not calm)
        high = grown | scaled
        if high.any() and self._grad_sq:
            total = sum(self._grad_sq.values()) or 1.0
            self._share = {k: v / total for k, v in self._grad_sq.items()}
        run = vec.run_lengths(high)
        carried = vec.first_true(~high)
        run[: len(run) if carried is None else carried] += self._streak
        out = []
        i = None if self._fired is not None else vec.first_true(run >= cfg.window)
        if i is not None:  # fires here: the evidence as of this norm
            self._fired = self._start(col, keep, i, int(run[i]))
            # The reference named: the parameter norm, else the early level, else the fallback.
            self._reference = (("parameter norm", weights) if scaled[i] and weights > 0 else
                               ("early median", early) if grown[i] else ("unscaled", math.nan))
            self._count(col, keep[: i + 1], norms[: i + 1])
            out.append(self._finding())
            self._count(col, keep[i + 1:], norms[i + 1:])
        else:
            self._count(col, keep, norms)
        self._streak_start = self._start(col, keep, len(run) - 1, int(run[-1]))
        self._streak = int(run[-1])
        return out

    def _start(self, col: Series, keep: np.ndarray, i: int, length: int) -> int:
        """The step where the streak of ``length`` ending at norm ``i`` began."""
        from traindoc.detectors import _vector as vec

        return vec.item(col.steps, keep[i - length + 1]) if length and length <= i + 1 else self._streak_start

    def _count(self, col: Series, keep: np.ndarray, norms: np.ndarray) -> None:
        """The running statistics of the norms, for the evidence."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        if not len(norms):
            return
        if self._n == 0:
            self._first = vec.item(col.values, keep[0])
        self._n += len(norms)
        self._last = vec.item(col.values, keep[-1])
        seen = norms[~np.isnan(norms)]
        if len(seen):
            self._top = max(self._top, float(seen.max()))
        self._sample.extend(norms)

    def finish(self) -> Iterator[Finding]:
        if self._fired is not None:  # the same finding, with the whole run's numbers
            yield self._finding()

    def _finding(self) -> Finding:
        cfg = self.config
        kind, value = self._reference
        above = {
            "parameter norm": f"{fmt(cfg.params)}x the parameter norm ({fmt(value)})",
            "early median": f"{fmt(cfg.relative)}x the median of the first {cfg.early} norms ({fmt(value)})",
            "unscaled": (f"{fmt(cfg.unscaled)} (this source measures no parameter norm to compare "
                         "with; a normalized model's gradient norm is about 1)"),
        }[kind]
        mid = median(self._sample.values)
        top = sorted(self._share, key=lambda k: -self._share[k])[:5]
        dominant = ", ".join(f"{k} ({self._share[k]:.0%})" for k in top)
        return finding(
            self.id, step=self._fired,
            message=(
                f"gradient norm {fmt(self._first)} at the first step, median {fmt(mid)}, max "
                f"{fmt(self._top)}, last {fmt(self._last)} over {self._n} measured steps; above "
                f"{above} for {cfg.window}+ consecutive measurements from step {self._fired}"
                + (f". Most of the norm is in {dominant}." if top else ".")
            ),
            cause=(
                "A loss term with a steep landscape or a large weight (matrix powers, exponentials, "
                "an unnormalized penalty), an LR too high, unnormalized inputs/targets, a "
                "missing normalization layer, or gradients that nothing clears between steps, "
                "summed over all of them (missing-zero-grad)."
                + (f" The parameters behind the norm: {names(top, 3)}." if top else "")
            ),
            fix=(
                "Find the term that produces it (the dominant parameters above point to it): "
                "normalize or reweight that term, scale inputs and targets to unit range, lower the "
                "LR. Clipping hides the size but the direction stays dominated by that term."
            ),
            evidence={"first": self._first, "median": mid, "max": self._top, "last": self._last,
                      "measured_steps": self._n, "reference": kind, "reference_value": value,
                      "threshold": {"parameter norm": cfg.params, "early median": cfg.relative,
                                    "unscaled": cfg.unscaled}[kind],
                      "dominant": {k: self._share[k] for k in top}},
            where=top,
        )

