"""nan-hidden-by-logging: the logged loss looks finite while the gradient norm is NaN/Inf."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Iterable

from traindoc.detectors._common import Example, finding, fmt
from traindoc.events import Event, Scalar
from traindoc.findings import Finding


class NanHiddenByLogging:
    """At ``consecutive`` logged steps in a row the gradient norm is NaN/Inf while the loss
    logged for the same step is finite, or at any logged step the norm is non-finite and the
    loss exactly 0. Hugging Face's ``logging_nan_inf_filter=True`` (the default) produces both:
    a NaN/Inf step loss is replaced by the window's running mean, and once the parameters are
    NaN every step loss is NaN, nothing is added, and the logged loss is 0.0. A single Inf
    norm (a GradScaler overflow in fp16) stays quiet.
    """

    id: ClassVar[str] = "nan-hidden-by-logging"
    needs: ClassVar[frozenset[str]] = frozenset({"loss", "grad_norm"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("fixtures/logs/golden/nan_hidden_by_logging.jsonl", 59),
        Example("fixtures/logs/golden/fp16_overflow_once.jsonl", None),
        Example("fixtures/logs/golden/healthy_logged_run.jsonl", None),
    )

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

    def observe(self, event: Event) -> Iterable[Finding]:
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
            cause=(
                "The training loss became NaN/Inf and the logging hides it: Hugging Face Trainer's "
                "logging_nan_inf_filter=True (the default) logs the running mean in its place, and "
                "0.0 once the parameters are NaN. The optimizer steps on non-finite gradients from "
                "here on, so the model and every later checkpoint are broken."
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
