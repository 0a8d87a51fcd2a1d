"""slow-eval: evaluation takes a large share of the run's wall time."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import Thinned
from traindoc.events import Event, EvalPass, RunEnd
from traindoc.findings import Finding


class SlowEval(Detector):
    """Evaluation phases (live: no_grad/inference_mode forward passes after an optimizer step,
    until training resumes) take ``share`` or more of the wall time of the periodic part of the
    run: from the end of the first evaluation to the end of the last, the evaluations in between
    against that span (the script's set-up and a final evaluation do not count). Needs at least
    ``min_evals`` evaluations and a span of ``min_span_s``.

    Passes on one row between every two optimizer steps are a policy acting, not an
    evaluation: a DQN chooses each action greedily from its Q-network in eval mode under
    ``no_grad`` (Stable-Baselines3's DQN, one environment), and its acting takes a large share of
    the time by design. They are left alone when every pass took one row and they came after
    every step (the median interval is 1)."""

    id = "slow-eval"
    needs = frozenset({"eval"})
    uses = frozenset({"end"})
    examples = (
        Example("live/golden/slow_eval.jsonl", 4),
        Example("live/golden/healthy_eval.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        share: float = 0.25  # of the wall time between evaluations
        min_evals: int = 3
        min_span_s: float = 0.5

        def __post_init__(self) -> None:
            require(self, share="(0, 1)", min_evals=">= 3")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        # The evaluations (one per phase), bounded however many: the first and the latest, how
        # many, their time (all, and all but the first) and the steps between them (a sample).
        self._first: EvalPass | None = None
        self._last: EvalPass | None = None
        self._evals = 0
        self._total = 0.0
        self._spent = 0.0
        self._gaps = Thinned(256)
        self._end: RunEnd | None = None
        self._one_row = True  # every evaluation's first forward took one row (a policy acting?)

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, RunEnd):
            self._end = event
        else:
            assert isinstance(event, EvalPass)
            # One per phase (a second model evaluated in it has no time). A no_grad pass of a
            # model left in train mode is not taken for an evaluation here: RL rollouts and
            # data generation look alike, and real evaluations call model.eval(). Nor is one
            # of a model that draws its output from a distribution (a policy acting in eval
            # mode, as Stable-Baselines3 collects rollouts), nor a pass of a model of its own
            # (a teacher's forward inside each step): it is training's.
            if (event.index == 0 and not event.training and not event.sampled and event.role != "other"
                    and 0 <= event.duration_s < math.inf and math.isfinite(event.elapsed_s)):  # times measured
                self._add(event)
        return iter(())

    def _add(self, e: EvalPass) -> None:
        self._one_row = self._one_row and e.rows == 1
        if self._first is None:
            self._first = e
        else:
            self._spent += e.duration_s
        if self._last is not None and e.step > self._last.step:
            self._gaps.append(e.step - self._last.step)
        self._last = e
        self._evals += 1
        self._total += e.duration_s

    def finish(self) -> Iterator[Finding]:
        cfg, evals = self.config, self._evals
        if evals < cfg.min_evals or self._first is None or self._last is None:
            return
        first, last = self._first, self._last
        span = last.elapsed_s - first.elapsed_s
        spent = self._spent
        if span < cfg.min_span_s or last.step <= first.step or spent / span < cfg.share:
            return
        share = spent / span
        per_eval = spent / (evals - 1)
        per_step = max(span - spent, 1e-9) / (last.step - first.step)
        gaps = self._gaps.values  # all of them up to 256 evaluations, then an even sample
        interval = statistics.median(gaps) if gaps else last.step - first.step
        if self._one_row and interval <= 1:
            return  # acting on one observation at every step (see the class)
        # Evaluating every I steps costs E / (E + I * T): a 10% share needs I = 9 E / T.
        suggested = max(int(interval) + 1, int(round(9 * per_eval / per_step, -1)) or 10)
        total = self._total
        run = f" ({fmt(total)} s in all, of a {fmt(self._end.duration_s)} s run)" if self._end else ""
        yield finding(
            self.id, step=first.step,
            message=(
                f"evaluation took {share:.0%} of the wall time between the first and the last of "
                f"{evals} evaluations (threshold {cfg.share:.0%}): {fmt(per_eval)} s per "
                f"evaluation every {fmt(interval)} steps, against {fmt(per_step * 1e3)} ms per "
                f"training step{run}."
            ),
            fix=(
                f"Evaluate less often: about every {suggested} steps keeps evaluation near 10% of "
                "the run. Evaluate a fixed subset during training (e.g. 50 batches) and the full "
                "set at the end; use a larger batch and torch.inference_mode() for evaluation."
            ),
            evidence={"evaluations": evals, "share": share, "seconds_per_eval": per_eval,
                      "interval_steps": interval, "ms_per_train_step": per_step * 1e3,
                      "eval_seconds_total": total, "suggested_interval": suggested,
                      "threshold": cfg.share},
            where=[first.where] if first.where else [],
        )
