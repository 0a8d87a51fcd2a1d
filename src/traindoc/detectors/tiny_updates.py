"""tiny-updates: the relative update size is far below the healthy band for the whole run."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import Thinned, median
from traindoc.events import Classification, Event, Optimizer, ParamStats, Scalar, StateLoad
from traindoc.findings import Finding

# Usual LR ranges (from-scratch training) by optimizer class, for the fix.
USUAL_LR = {
    "Adam": "1e-4 to 3e-3", "AdamW": "1e-4 to 3e-3", "Adamax": "1e-4 to 3e-3", "NAdam": "1e-4 to 3e-3",
    "RAdam": "1e-4 to 3e-3", "SGD": "1e-3 to 1e-1", "Muon": "1e-3 to 2e-2 (torch.optim.Muon's default is 1e-3)",
    "RMSprop": "1e-4 to 1e-2", "Adagrad": "1e-3 to 1e-1", "Adafactor": "1e-3 to 1e-2",
}
# The low end of each USUAL_LR range: an LR under a tenth of it is far too low.
USUAL_LOW = {"Adam": 1e-4, "AdamW": 1e-4, "Adamax": 1e-4, "NAdam": 1e-4, "RAdam": 1e-4, "SGD": 1e-3,
             "Muon": 1e-3, "RMSprop": 1e-4, "Adagrad": 1e-3, "Adafactor": 1e-3}
_ENDS = 10  # losses (and cross-entropy values) at each end of the run compared for progress


_KEEP = 1024  # sampled parameter-steps kept per group (evenly spread over the run)


class TinyUpdates(Detector):
    """Per optimizer parameter group, the median relative update ||dw||/||w|| per step over the
    second half of the run is far below the healthy band (about 1e-4 to 1e-2; 1e-3 typical):
    below ``far``, or below ``floor`` while the loss improved by less than ``progress`` (small
    updates that still make progress, as in a low-LR fine-tune, are fine).

    Updates are judged at the LR the schedule asked for: each sampled update is scaled by the
    group's peak LR over its LR at that step (``ParamStats.lr``, else the ``lr`` signal for
    group 0 of optimizer 0), so updates that shrink because a cosine or linear schedule decays
    to its floor count at the size the schedule's peak gives them. A run that did not start
    from scratch, one that loaded optimizer state (a resume) or whose cross-entropy started
    below ``trained`` times its chance level ln(classes) (trained weights: a resume, a
    fine-tune), is not judged by its loss progress: its loss is flat because it converged, and
    only ``far`` applies. Between two checkpoints (no loss to judge progress by) an update
    below ``floor`` also fires when the stored LR is under a tenth of the low end of the
    optimizer family's usual LR: SGD at 1e-5 moved a small model's weights about 4e-5 of their
    norm per step, above ``far``, and the stored LR is the second witness. Groups whose LR is
    exactly 0 at every sampled step and parameters that never moved belong to
    frozen-parameters (a warmup that starts at 0 does not make a group's LR 0). Optimizers
    whose step re-evaluates the closure it is handed (LBFGS) are not judged: they size each
    update by a line search and stop moving once their own convergence test passes (a closure
    evaluated once a step, as Lightning hands every optimizer, does not count). Judged at the
    end."""

    id = "tiny-updates"
    needs = frozenset({"params", "optimizer"})
    uses = frozenset({"loss", "lr", "classification", "load"})
    examples = (
        Example("zoo/muon_low_lr.py", 0),
        Example("ckpt/golden/tiny_lr_diff.jsonl", -1),
        Example("ckpt/golden/bf16_norms_frozen_diff.jsonl", None),
        Example("zoo/healthy_muon.py", None),
        Example("zoo/healthy_gpt.py", None),
        Example("zoo/healthy_nanogpt.py", None),
        Example("zoo/healthy_nanogpt_resume.py", None),
        Example("zoo/healthy_linear_decay_resume.py", None),
    )

    # Carried over a resume: the update ratios per parameter group (bounded samples), their LRs and
    # peaks, the first and latest losses, and whether the run started from trained weights.
    carry = ("_opt", "_lr", "_ratios", "_peak", "_moved", "_span", "_first", "_last", "_losses",
                "_lr_at", "_ce", "_resumed")

    @dataclass(frozen=True)
    class Config:
        floor: float = 1e-4
        far: float = 1e-5
        progress: float = 0.1  # relative loss improvement over the run
        min_steps: int = 10
        trained: float = 0.5  # a cross-entropy starting below this share of ln(classes): trained weights

        def __post_init__(self) -> None:
            if not 0 < self.far <= self.floor:
                raise ValueError(f"need 0 < far <= floor, got far={self.far}, floor={self.floor}")
            require(self, trained="(0, 1)")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._opt: dict[int, Optimizer] = {}
        self._lr: dict[tuple[int, int], float] = {}
        # per group: (step, ||dw||/||w|| per step, the group's LR at that step or None)
        # Per group, (step, update ratio, LR) of its sampled parameters: a bounded, evenly
        # spread sample (three Thinned filled in lockstep thin alike), and its peak LR.
        self._ratios: dict[tuple[int, int], tuple[Thinned, Thinned, Thinned]] = {}
        self._peak: dict[tuple[int, int], float] = {}
        self._moved: set[tuple[int, int]] = set()
        self._span: dict[tuple[int, int], int] = {}
        self._first: list[float] = []  # the first losses
        self._last: deque[float] = deque(maxlen=_ENDS)  # the latest losses
        self._losses = 0
        self._lr_at: dict[int, float] = {}  # step -> the ``lr`` signal (optimizer 0, group 0)
        self._ce: list[tuple[float, int]] = []  # the first cross-entropy values, with their classes
        self._resumed = False  # optimizer state was loaded

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Scalar):
            if event.value == event.value and abs(event.value) != float("inf"):
                if event.name == "lr":
                    if len(self._lr_at) >= 64:  # only the current step's is needed
                        self._lr_at.clear()
                    self._lr_at[event.step] = event.value
                else:
                    self._add_loss(event.value)
            return iter(())
        if isinstance(event, Classification):
            if len(self._ce) < _ENDS and math.isfinite(event.value) and event.classes > 1:
                self._ce.append((event.value, event.classes))
            return iter(())
        if isinstance(event, StateLoad):
            self._resumed = self._resumed or event.target == "optimizer"
            return iter(())
        if isinstance(event, Optimizer):
            self._opt[event.index] = event
            for g in event.groups:
                self._lr[(event.index, g.index)] = g.lr
            return iter(())
        assert isinstance(event, ParamStats)
        if event.optimizer < 0 or event.update is None or not event.requires_grad or event.has_grad is False:
            return iter(())
        if event.update != event.update:
            return iter(())
        key = (event.optimizer, event.group)
        lr = event.lr if event.lr is not None else self._lr_at.get(event.step) if key == (0, 0) else None
        # A checkpoint diff spans ``steps`` optimizer steps: its per-step share of the change.
        cols = self._ratios.get(key)
        if cols is None:
            cols = self._ratios[key] = (Thinned(_KEEP), Thinned(_KEEP), Thinned(_KEEP))
        cols[0].append(event.step)
        cols[1].append(event.update / max(event.steps, 1))
        cols[2].append(lr if lr is not None else math.nan)
        if lr is not None and math.isfinite(lr):
            self._peak[key] = max(self._peak.get(key, lr), lr)
        self._span[key] = max(self._span.get(key, 0), event.steps)
        if event.update > 0:
            self._moved.add(key)
        return iter(())

    def _add_loss(self, value: float) -> None:
        self._losses += 1
        if len(self._first) < _ENDS:
            self._first.append(value)
        self._last.append(value)

    def _progress(self) -> float | None:
        """Relative improvement of the loss (10-step medians, start against end); None if unknown,
        or if either is negative (an actor's -Q, a log-density: no scale to be relative to)."""
        if self._losses < 2 * _ENDS:
            return None
        first, last = median(self._first), median(list(self._last))
        return (first - last) / first if first > 0 and last >= 0 else None

    def _started_trained(self) -> bool:
        """Did the run start from trained weights: a resume, or a cross-entropy well below chance?"""
        if self._resumed:
            return True
        if len(self._ce) < 3:
            return False
        chance = median([math.log(c) for _, c in self._ce])
        return median([v for v, _ in self._ce]) < self.config.trained * chance

    def finish(self) -> Iterator[Finding]:
        cfg = self.config
        progress = self._progress()
        trained = self._started_trained()
        stuck = progress is not None and progress < cfg.progress and not trained
        low: list[tuple[tuple[int, int], float, int, float, float | None]] = []
        for key, (col_steps, col_ratios, col_lrs) in self._ratios.items():
            series = [(int(s), r, None if math.isnan(lr) else lr)
                      for s, r, lr in zip(col_steps.values, col_ratios.values, col_lrs.values)]
            steps = sorted({s for s, _, _ in series})
            observed = max(len(steps), self._span.get(key, 1))
            opt = self._opt.get(key[0])
            if observed < cfg.min_steps or key not in self._moved or (opt is not None and opt.reevaluates):
                continue  # a line search sizes the updates and stops at its own test
            peak = self._peak.get(key)
            if (peak if peak is not None else self._lr.get(key, 1.0)) == 0:
                continue  # an LR of exactly 0 throughout: frozen-parameters' territory
            half = steps[len(steps) // 2]
            # At the peak LR: an update shrinks with the LR its schedule asks for.
            scaled = [r * (peak / lr if peak and lr else 1.0) for s, r, lr in series
                      if s >= half and lr != 0]
            if not scaled:
                continue
            ratio = median(scaled)
            stored_lr = peak if peak is not None else self._lr.get(key)
            lr_low = (progress is None and self._span.get(key, 1) > 1  # a diff without a loss
                      and _far_below_usual(opt, stored_lr))
            if ratio < cfg.far or (ratio < cfg.floor and (stuck or lr_low)):
                late = [lr for s, _, lr in series if s >= half and lr]
                low.append((key, ratio, steps[0], peak or math.nan, min(late) if late else None))
        if not low:
            return
        parts, fixes, shown = [], [], []
        for (oi, gi), ratio, _, peak, lowest in low:
            opt = self._opt.get(oi)
            cls = opt.cls if opt else "optimizer"
            lr = peak if math.isfinite(peak) else self._lr.get((oi, gi), float("nan"))
            shown.append(lr)
            decayed = (f" (updates at the lower LRs of its schedule, down to {fmt(lowest)}, scaled up to it)"
                       if lowest is not None and lowest < 0.9 * lr else "")
            family = _family(cls)
            usual = USUAL_LR[family] if family else "see its documentation"
            if progress is None and _far_below_usual(opt, lr):
                decayed += f"; the LR is under a tenth of {cls}'s usual {usual}"
            parts.append(f"{cls} group {gi} (lr {fmt(lr)} at its peak): median ||dw||/||w|| {fmt(ratio)} "
                         f"per step at that LR{decayed}")
            fixes.append(f"{cls}: usual LR {usual}, you have {fmt(lr)}")
        why = ""
        if progress is not None:
            why = (f"; the loss improved by only {progress:.1%}" if stuck else
                   f"; the loss improved by {progress:.1%}" + (" from trained weights" if trained else ""))
        yield finding(
            self.id, step=min(s for _, _, s, _, _ in low),
            message=(
                "; ".join(parts) + " over the second half of the run (healthy band about 1e-4 to "
                "1e-2)" + why + "."
            ),
            fix="Raise the LR into the usual range and check the schedule's values: " + "; ".join(fixes) + ".",
            evidence={"groups": [f"optimizer {o} group {g}" for (o, g), _, _, _, _ in low],
                      "median_update_ratio": [r for _, r, _, _, _ in low],
                      "peak_lr": shown,
                      "floor": cfg.floor, "far": cfg.far, "loss_improvement": progress,
                      "started_trained": trained},
        )


def _far_below_usual(opt: Optimizer | None, lr: float | None) -> bool:
    """The LR is under a tenth of the low end of the optimizer family's usual LR."""
    if opt is None or lr is None or not lr > 0:
        return False
    family = _family(opt.cls)
    return family is not None and lr < USUAL_LOW[family] / 10


def _family(cls: str) -> str | None:
    """The USUAL_LR key of an optimizer class: its own name, or the family a checkpoint names
    ("Adam-family", "SGD-family")."""
    if cls in USUAL_LR:
        return cls
    return next((k for k in USUAL_LR if cls.startswith(k + "-")), None)
