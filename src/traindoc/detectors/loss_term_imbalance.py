"""loss-term-imbalance: one weighted term of a multi-term loss supplies nearly all the gradient."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names, require
from traindoc.detectors._maths import Thinned, median
from traindoc.events import Event, LossTerm
from traindoc.findings import Finding


class LossTermImbalance(Detector):
    """On ``confirm`` measured steps in a row, the same term supplies at least ``share`` of the
    summed gradient norms of the terms, both over the parameters that at least two terms reach
    and over all the parameters the loss reaches, and
    its weight is to blame: it is the largest weight and above 1 (seed 000: ``lambda_delta =
    100``), or it is below the weight of another term (a term meant to be small that dominates
    anyway, seed 001's acyclicity penalty). A main loss at weight 1 next to regularizers
    weighted 0.01 is the intended balance and stays quiet, as do terms without weights.
    """

    id = "loss-term-imbalance"
    needs = frozenset({"loss_terms"})
    examples = (
        Example("live_metrics/golden/loss_term_imbalance.jsonl", 0),
        Example("live_metrics/golden/healthy_moe_terms.jsonl", None),
        Example("zoo/loss_term_imbalance.py", 0),
        Example("zoo/exploding_acyclicity.py", 0),
        Example("zoo/healthy_multitask.py", None),
        Example("zoo/healthy_moe.py", None),
    )

    # Carried over a resume: the step being gathered (its rows), the current streak (at most confirm
    # steps) and the streak that fired, in its bounded summary.
    carry = ("_step", "_rows", "_streak", "_measured", "_fired")

    @dataclass(frozen=True)
    class Config:
        share: float = 0.9  # the dominant term's share of the gradient norm
        confirm: int = 3  # measured steps in a row

        def __post_init__(self) -> None:
            require(self, share="(0.5, 1)", confirm=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._step: int | None = None
        self._rows: list[LossTerm] = []
        # Until it fires: the current streak, (step, dominant, its rows), at most ``confirm``
        # long; then the fired streak goes on in a bounded summary.
        self._streak: list[tuple[int, str, list[LossTerm]]] = []
        self._fired: _Streak | None = None
        self._measured = 0

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, LossTerm)
        if event.step != self._step:
            yield from self._judge()
            self._step, self._rows = event.step, []
        self._rows.append(event)

    def finish(self) -> Iterator[Finding]:
        yield from self._judge()
        if self._fired is not None:
            yield self._finding(self._fired)

    def _judge(self) -> Iterator[Finding]:
        rows, self._rows = self._rows, []
        grads = [r.grad for r in rows]
        if len(rows) < 2 or any(g is None or not math.isfinite(g) for g in grads):
            return  # no shared parameters, or not measured
        total = sum(g for g in grads if g is not None)
        if total <= 0:
            return
        self._measured += 1
        top = max(range(len(rows)), key=lambda i: rows[i].grad or 0.0)
        dominant = rows[top]
        # The share on the shared parameters, and on all of them: a balancing loss that acts on
        # the router alone may dominate the router's gradient without steering the model.
        total_all = sum(r.grad_all or 0.0 for r in rows)
        share = min((dominant.grad or 0.0) / total, (dominant.grad_all or 0.0) / total_all if total_all > 0 else 0.0)
        w = [_abs_weight(r) for r in rows]
        others = max(w[i] for i in range(len(rows)) if i != top)
        blamed = (w[top] > 1 and w[top] > others) or w[top] < others
        if share < self.config.share or not blamed:
            self._streak = []
            return
        if self._fired is not None:  # the streak that fired goes on (after a break too)
            if self._fired.name == dominant.name:
                self._fired.add(rows[0].step, rows)
            return
        if self._streak and self._streak[-1][1] != dominant.name:
            self._streak = []
        self._streak.append((rows[0].step, dominant.name, rows))
        if len(self._streak) >= self.config.confirm:
            self._fired = _Streak(self._streak)
            self._streak = []
            yield self._finding(self._fired)

    def _finding(self, streak: _Streak) -> Finding:
        cfg = self.config
        first, name = streak.steps[0], streak.name
        last_rows = streak.rows
        term_names = [r.name for r in last_rows]
        shares = {n: median(streak.shares[n].values if n in streak.shares else []) for n in term_names}
        unit = _unit_shares(last_rows)
        weights = {r.name: r.weight for r in last_rows}
        dom = next(r for r in last_rows if r.name == name)
        rest = [r for r in last_rows if r.name != name]
        w_dom = _abs_weight(dom)
        up = w_dom > 1 and w_dom > max(_abs_weight(r) for r in rest)
        parts = ", ".join(f"{r.name} (weight {fmt(r.weight)}) {shares[r.name]:.1%}" for r in rest)
        at_unit = ""
        if unit and any(abs(_abs_weight(r) - 1) > 1e-9 for r in last_rows):
            at_unit = (" With all weights at 1 the shares would be "
                       + ", ".join(f"{n} {s:.0%}" for n, s in unit.items()) + ".")
        strongest = max(rest, key=lambda r: r.grad or 0.0)
        balanced = w_dom * (strongest.grad or 0.0) / (dom.grad or 1.0)
        shared = dom.shared
        if up:
            cause = (f"The weight {fmt(dom.weight)} on {name} multiplies its gradient {fmt(w_dom)}x: the "
                     f"shared parameters follow {name} alone and {names([r.name for r in rest], 3)} "
                     f"{'barely moves them' if len(rest) == 1 else 'barely move them'}, so what "
                     f"{'it measures' if len(rest) == 1 else 'they measure'} stalls even while the total loss falls.")
        else:
            cause = (f"{name} has the weight {fmt(dom.weight)}, smaller than {strongest.name}'s, yet its "
                     "gradient dominates: the term is on a much larger scale (a sum instead of a mean, "
                     "a penalty that grows quickly) and its weight does not tame it.")
        fix = (f"Lower the weight of {name} (about {fmt(balanced)} gives it the same gradient norm as "
               f"{strongest.name}), or normalize the terms (use means, divide each by its initial "
               "value) and pick weights so that the shares start within an order of magnitude; "
               "warm auxiliary weights up from 0.")
        where = [f"backward at {dom.where}"] if dom.where else []
        return finding(
            self.id, step=first,
            message=(
                f"{name} (weight {fmt(dom.weight)}) supplies {shares[name]:.1%} of the loss terms' "
                f"gradient norm on the {shared} parameter tensor{'s' if shared != 1 else ''} they share (median over "
                f"{streak.count} measured steps from step {first}; threshold {cfg.share:.0%}); "
                f"{parts}.{at_unit}"
            ),
            cause=cause, fix=fix,
            evidence={"dominant": name, "shares": shares, "weights": weights,
                      "shares_at_unit_weights": unit,
                      "grad_norms": {r.name: r.grad or 0.0 for r in last_rows},
                      "threshold": cfg.share, "measured_steps": list(streak.steps),
                      "shared_parameters": shared, "parameters": dom.params},
            where=[*term_names, *where],
        )


class _Streak:
    """Measured steps on which one term dominated, bounded however long it goes on: how many,
    the first 20 steps, the last step's rows, and each term's shares (an even sample)."""

    def __init__(self, streak: list[tuple[int, str, list[LossTerm]]]) -> None:
        self.name, self.count = streak[0][1], 0
        self.steps: list[int] = []
        self.rows: list[LossTerm] = []
        self.shares: dict[str, Thinned] = {}
        for step, _, rows in streak:
            self.add(step, rows)

    def add(self, step: int, rows: list[LossTerm]) -> None:
        self.count += 1
        if len(self.steps) < 20:
            self.steps.append(step)
        self.rows = rows
        for n, x in _shares(rows).items():
            self.shares.setdefault(n, Thinned(256)).append(x)


def _abs_weight(r: LossTerm) -> float:
    return abs(r.weight) if math.isfinite(r.weight) else 1.0


def _shares(rows: list[LossTerm]) -> dict[str, float]:
    total = sum(r.grad or 0.0 for r in rows)
    return {r.name: (r.grad or 0.0) / total for r in rows} if total > 0 else {}


def _unit_shares(rows: list[LossTerm]) -> dict[str, float]:
    raw = {r.name: (r.grad or 0.0) / _abs_weight(r) for r in rows if _abs_weight(r) > 0}
    total = sum(raw.values())
    return {n: g / total for n, g in raw.items()} if total > 0 else {}
