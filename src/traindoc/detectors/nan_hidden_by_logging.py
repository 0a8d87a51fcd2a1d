"""nan-hidden-by-logging: the logged loss looks finite while the gradient norm is NaN/Inf."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from traindoc.detectors import _carry
from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.events import Event, RunStart, Series
from traindoc.findings import Finding


class NanHiddenByLogging(Detector):
    """At ``consecutive`` logged steps in a row the gradient norm is NaN/Inf while the loss
    logged for the same step is finite, or at any logged step the norm is non-finite and the
    loss exactly 0. Hugging Face's ``logging_nan_inf_filter=True`` (the default) produces both:
    a NaN/Inf step loss is replaced by the window's running mean, and once the parameters are
    NaN every step loss is NaN, nothing is added, and the logged loss is 0.0. A single Inf
    norm (a GradScaler overflow in fp16) stays quiet.

    A live stream is not judged: there the loss is the value handed
    to backward(), not a logger's, so no logger can have hidden anything (nonfinite and
    masked-nonfinite judge that stream's NaNs on their own evidence).
    """

    id = "nan-hidden-by-logging"
    needs = frozenset({"loss", "grad_norm"})
    uses = frozenset({"run"})
    examples = (
        Example("fixtures/logs/golden/nan_hidden_by_logging.jsonl", 59),
        Example("fixtures/logs/golden/fp16_overflow_once.jsonl", None),
        Example("fixtures/logs/golden/healthy_logged_run.jsonl", None),
    )

    # Carried over a resume: the latest logged loss and norm, the hidden steps (counts, the first
    # few and the current streak, at most consecutive long before it fires).
    carry = ("_loss", "_norm", "_judged", "_streak", "_hidden", "_zero", "_fired", "_shown", "_live")

    @dataclass(frozen=True)
    class Config:
        consecutive: int = 3

        def __post_init__(self) -> None:
            require(self, consecutive=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._loss: tuple[int, float] = (-1, math.nan)
        self._norm: tuple[int, float] = (-1, math.nan)
        self._judged = -1
        self._streak: list[tuple[int, float, float]] = []  # (step, loss, norm)
        self._hidden = 0  # logged steps with this pattern, in all
        self._zero = 0  # ... of which the logged loss is exactly 0
        self._fired: list[tuple[int, float, float]] | None = None
        self._shown: list[tuple[int, float, float]] = []  # the first few, for the message
        self._live = False

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``carry``; of the streak, what fires: its last
        ``consecutive`` steps)."""
        streak = _carry.encode(self._streak[-self.config.consecutive:])
        return {**super().state_dict(), "_streak": streak}

    def observe(self, event: Event) -> Iterable[Finding]:
        assert isinstance(event, RunStart)  # its numbers come as columns
        self._live = event.source == "live"
        return ()

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """The next points of the loss and the gradient norm. A step is judged once: at the
        first point, in the order a per-point source sends them (``events.scalars``), where the
        latest loss and the latest norm (a point of the call before counts) are of that step."""
        if self._live or not columns:
            return []
        import numpy as np

        from traindoc.detectors import _vector as vec

        a, *rest = columns.values()
        b = rest[0] if rest else Series("grad_norm" if a.name == "loss" else "loss", [], [])
        sa, sb = vec.ints(a.steps), vec.ints(b.steps)
        latest = {"loss": self._loss, "grad_norm": self._norm}
        pa, pb = latest[a.name], latest[b.name]  # the points carried, first in the arrays below
        ea, eb = np.concatenate(([pa[0]], sa)), np.concatenate(([pb[0]], sb))
        xa = np.concatenate(([pa[1]], vec.floats(a.values)))
        xb = np.concatenate(([pb[1]], vec.floats(b.values)))
        # The points where the latest of both columns are of their step, in the order a
        # per-point source sends them: row by row when both columns are on the same steps,
        # else merged by step, a step's points of a first. ``before_b``: how many points of b
        # come before each point of a; ``before_a``: of a before each point of b.
        dense = len(sa) == len(sb) and np.array_equal(sa, sb)
        if dense and not (eb[:-1] == sa).any():  # each row judged at its point of b
            step, va, vb = sb, xa[1:], xb[1:]
        else:
            if dense:
                before_b, before_a = np.arange(len(sa)), np.arange(1, len(sb) + 1)
            else:
                before_b, before_a = np.searchsorted(sb, sa, "left"), np.searchsorted(sa, sb, "right")
            ia, ib = np.flatnonzero(eb[before_b] == sa), np.flatnonzero(ea[before_a] == sb)
            step = np.concatenate((sa[ia], sb[ib]))
            va = np.concatenate((xa[ia + 1], xa[before_a[ib]]))  # a's latest value there
            vb = np.concatenate((xb[before_b[ia]], xb[ib + 1]))
            order = np.argsort(np.concatenate((ia + before_b[ia], ib + before_a[ib])), kind="stable")
            step, va, vb = step[order], va[order], vb[order]
        at = np.flatnonzero(vec.first_of_step(step) & (step != self._judged))  # judged: a step once
        latest[a.name] = (int(ea[-1]), vec.item(a.values, -1)) if len(sa) else pa
        latest[b.name] = (int(eb[-1]), vec.item(b.values, -1)) if len(sb) else pb
        self._loss, self._norm = latest["loss"], latest["grad_norm"]
        if not len(at):
            return []
        self._judged = int(step[at[-1]])
        loss, norm = (va, vb) if a.name == "loss" else (vb, va)
        lv, nv = loss[at], norm[at]
        hidden = ~np.isfinite(nv) & np.isfinite(lv)
        if not hidden.any():  # (a healthy log: nothing more to do)
            self._streak = []
            return []

        def entry(j: int) -> tuple[int, float, float]:
            return int(step[at[j]]), float(lv[j]), float(nv[j])

        run = vec.run_lengths(hidden)
        carried = self._streak  # a streak of the call before goes on while hidden
        length = run + np.where(run == np.arange(1, len(run) + 1), len(carried), 0)

        def streak(k: int) -> list[tuple[int, float, float]]:  # the streak at judged step k
            return (carried if run[k] == k + 1 else []) + [entry(j) for j in range(k + 1 - int(run[k]), k + 1)]

        h = np.flatnonzero(hidden)
        zero = lv[h] == 0.0
        hidden0, zero0, shown = self._hidden, self._zero, self._shown + [entry(j) for j in h[:3].tolist()]
        out = []
        i = vec.first_true((length[h] >= self.config.consecutive) | zero) if self._fired is None else None
        if i is not None:  # what a point-by-point judgement yields then, with the state of that point
            self._fired = streak(int(h[i]))
            self._hidden, self._zero = hidden0 + i + 1, zero0 + int(zero[: i + 1].sum())
            self._shown = shown[: min(3, len(self._shown) + i + 1)]
            out.append(self._finding())
        self._hidden, self._zero, self._shown = hidden0 + len(h), zero0 + int(zero.sum()), shown[:3]
        self._streak = streak(len(run) - 1)
        return out

    def finish(self) -> Iterable[Finding]:
        return (self._finding(),) if self._fired is not None else ()

    def _finding(self) -> Finding:
        assert self._fired is not None
        step, loss, norm = self._fired[0]
        shown = "; ".join(f"step {s}: loss {fmt(lo)}, grad_norm {n}" for s, lo, n in self._shown)
        zero = (f"; at {self._zero} of them the logged loss is exactly 0, what the filter logs once "
                "every step's loss is NaN") if self._zero else ""
        return finding(
            self.id, step=step,
            message=(
                f"from step {step} the gradient norm is non-finite while the logged loss is finite at "
                f"{self._hidden} logged step(s) ({shown}){zero}: the logger replaced the NaN/Inf loss "
                f"(threshold: {self.config.consecutive} logged steps in a row, or a loss of exactly 0)."
            ),
            fix=(
                "Set TrainingArguments(logging_nan_inf_filter=False) to see the real loss; find the "
                "first bad step (torch.autograd.set_detect_anomaly(True), or traindoc run --record); "
                f"resume from a checkpoint before step {step} with a lower LR or gradient clipping."
            ),
            evidence={"first_step": step, "logged_loss": loss, "grad_norm": norm,
                      "hidden_steps": self._hidden, "zero_loss_steps": self._zero,
                      "threshold": self.config.consecutive},
        )
