"""nan-hidden-by-logging: the logged loss looks finite while the gradient norm is NaN/Inf."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from traindoc.detectors import _carry
from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt
from traindoc.events import Event, RunStart, Scalar, Series
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
            if self.consecutive < 1:
                raise ValueError(f"consecutive must be >= 1, got {self.consecutive}")

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
        if isinstance(event, RunStart):
            self._live = event.source == "live"
            return ()
        if self._live:
            return ()
        assert isinstance(event, Scalar)
        if event.name == "loss":
            self._loss = (event.step, event.value)
        else:
            self._norm = (event.step, event.value)
        step = event.step
        if self._loss[0] != step or self._norm[0] != step or self._judged == step:
            return ()
        self._judged = step
        loss, norm = self._loss[1], self._norm[1]
        if math.isfinite(norm) or not math.isfinite(loss):
            self._streak = []  # healthy, or the NaN is in plain sight (nonfinite reports it)
            return ()
        self._hidden += 1
        self._zero += loss == 0.0
        self._streak.append((step, loss, norm))
        if len(self._shown) < 3:
            self._shown.append((step, loss, norm))
        if self._fired is None and (len(self._streak) >= self.config.consecutive or loss == 0.0):
            self._fired = list(self._streak)
            return (self._finding(),)
        return ()

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """Both columns at once: the steps ``observe`` judges (those both columns log), the
        hidden ones among them, and the first point where ``observe`` fires."""
        from traindoc.detectors import _vector as vec

        if self._live:
            return []
        return vec.judge(self, columns, {"loss", "grad_norm"}, self._observe_columns)

    def _observe_columns(self, columns: dict[str, Series]) -> list[Finding]:
        import numpy as np

        from traindoc.detectors import _vector as vec

        for c in columns.values():  # observe remembers each column's last point
            if len(c) and c.name == "loss":
                self._loss = (vec.item(c.steps, -1), vec.item(c.values, -1))
            elif len(c):
                self._norm = (vec.item(c.steps, -1), vec.item(c.values, -1))
        if len(columns) < 2 or not all(len(c) for c in columns.values()):
            return []  # no step has both
        a, b = columns.values()
        # A step is judged when the second column's first point there arrives: the engine
        # replays same-step columns row by row (the first column's first point there is the
        # latest) and merges the others by step (its last point).
        first_a = np.flatnonzero(vec.first_of_step(vec.ints(a.steps)))
        if vec.dense([a, b]):
            ia = ib = first_a
        else:
            ia = np.append(first_a[1:] - 1, len(a) - 1)
            ib = np.flatnonzero(vec.first_of_step(vec.ints(b.steps)))
            _, ja, jb = np.intersect1d(vec.ints(a.steps)[first_a], vec.ints(b.steps)[ib],
                                       assume_unique=True, return_indices=True)
            ia, ib = ia[ja], ib[jb]
        if len(ib) and b.steps[int(ib[0])] == -1:  # observe starts with ``_judged = -1``
            ia, ib = ia[1:], ib[1:]
        if not len(ia):
            return []
        self._judged = vec.item(b.steps, ib[-1])
        (loss, il), (norm, in_) = ((a, ia), (b, ib)) if a.name == "loss" else ((b, ib), (a, ia))
        lv, nv = vec.floats(loss.values)[il], vec.floats(norm.values)[in_]
        hidden = ~np.isfinite(nv) & np.isfinite(lv)
        if not hidden.any():
            return []

        def entry(j: int) -> tuple[int, float, float]:
            step = vec.item(b.steps, ib[j])
            return step, vec.item(loss.values, il[j]), vec.item(norm.values, in_[j])

        at = np.flatnonzero(hidden)
        zero = lv[at] == 0.0
        run = vec.run_lengths(hidden)
        out = []
        i = vec.first_true((run[at] >= self.config.consecutive) | zero)
        if i is not None:  # what observe yields then, with the state of that point
            k = int(at[i])
            self._fired = [entry(j) for j in range(k + 1 - int(run[k]), k + 1)]
            self._hidden, self._zero = i + 1, int(zero[: i + 1].sum())
            self._shown = [entry(j) for j in at[: min(3, i + 1)].tolist()]
            out.append(self._finding())
        self._hidden, self._zero = len(at), int(zero.sum())
        self._shown = [entry(j) for j in at[:3].tolist()]
        self._streak = [entry(j) for j in range(len(hidden) - int(run[-1]), len(hidden))]
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
