"""val-at-chance: validation accuracy stays at chance (1/C) while the model learns."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Iterable

from traindoc.detectors import _carry
from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar
from traindoc.findings import Finding


# Class counts a plateau is read as, most usual first, when its noise allows several (0.109 +-
# 0.01 is 10 classes, not 9).
_COMMON = (2, 10, 100, 1000, 5, 4, 3, 20, 200, 6, 7, 8, 9)
_WINDOW = 64  # evaluations judged together at most
_SETTLE = 6  # evaluations a stretch keeps before its noise is known well enough to give values up
_SCAN = 8  # later starts tried at one evaluation (each costs a plateau test)
_DENSE = 2000  # past this many evaluations, judged at every (n // _DENSE)th (per-step logs)
_ABOVE = 0.7  # an accuracy above this is at no chance: 1/2 and its band lie below
# (chance, C, where C comes from, band, noise) of a plateau at chance.
Plateau = tuple[float, int, str, float, float]


class ValAtChance(Detector):
    """``min_evals`` consecutive validation accuracies or more stay within the noise of chance
    (1/C) while the model learns: training accuracy clearly above chance (``train_gap`` above
    the band), or, when no training accuracy is logged, a training loss ``loss_drop`` below its
    start. C comes from ``classes`` (``--num-classes``), else from ``val_classes`` (live: the
    number of logits of the evaluation's loss calls; logs: a ``num_classes`` column); without
    either, a plateau whose median is within ``infer_margin`` of 1/C (or within the noise of
    its median) for a whole number C is read as chance (0.1% for 1000 classes, 50% for 2;
    10 rather than 9 when the noise allows both), and the message asks for C.

    "Within the noise": a finite validation set scatters the accuracy of a model at chance
    around 1/C (10 classes, 500 images: about +-1.3 points). The noise is measured from the
    stretch itself, as the spread of the differences between consecutive evaluations (which a
    slow trend hardly moves), and the band is ``noise_k`` times it, at least ``margin`` of
    chance and ``min_margin``. A stretch is a plateau at chance when every value lies in the
    band, its median within the noise of 1/C, and its later half no higher than its earlier
    half beyond the noise: a healthy run that starts near chance and climbs out of it never
    forms one. It fires when such a stretch of ``min_evals`` is seen while the model learns,
    or at the end of the run when a stretch lasting to the end was seen before the model had
    learnt enough.

    Accuracies in percent are handled: ``percent`` says which unit the source logged (the logs
    face tells it from the whole log's accuracy columns); left None, any value above 1 seen so
    far means percent.
    """

    id = "val-at-chance"
    needs = frozenset({"val_acc"})
    uses = frozenset({"train_acc", "loss", "val_classes"})
    examples = (
        Example("fixtures/logs/golden/val_at_chance.jsonl", 2),
        Example("fixtures/logs/golden/val_at_chance_percent.jsonl", 2),
        Example("live_eval_metrics/golden/val_at_chance_printed.jsonl", 96),
        Example("live_eval_metrics/golden/val_at_chance_derived.jsonl", 96),
        Example("zoo/val_at_chance_label_order.py", 96),
        Example("fixtures/logs/meaning/val_chance_noisy_percent.csv", 7),
        Example("fixtures/logs/meaning/val_chance_imagenet_top1.jsonl", 1500),
        Example("fixtures/logs/golden/healthy_val_acc.jsonl", None),
        Example("live_eval_metrics/golden/healthy_label_order.jsonl", None),
        Example("zoo/healthy_label_order.py", None),
        Example("fixtures/logs/meaning/healthy_val_leaves_chance.csv", None),
        Example("fixtures/logs/meaning/val_chance_not_learning.jsonl", None),
    )

    # Carried over a resume: the evaluations (the latest 256, each with the training accuracy then),
    # the first and latest losses, where the current stretch near chance began and where it fired,
    # and the chance, band and noise it fired with.
    carry = ("_percent", "_train", "_train_best", "_loss_first", "_loss_last", "_vals", "_trains",
                "_start", "_fired", "_chance", "_classes", "_measured", "_source", "_band", "_noise")

    @dataclass(frozen=True)
    class Config:
        classes: int | None = None  # C; None: inferred from a plateau at 1/C
        margin: float = 0.1  # band around chance, as a share of chance ...
        min_margin: float = 0.005  # ... but at least this (absolute, accuracy in [0, 1])
        noise_k: float = 3.5  # ... and this many times the evaluation-to-evaluation noise
        infer_margin: float = 0.03  # without classes: the plateau's median this close to 1/C
        min_evals: int = 3
        train_gap: float = 0.1  # training accuracy this far above the band (absolute)
        loss_drop: float = 0.3  # or the training loss this share below its start
        percent: bool | None = None  # accuracies logged in percent; None: told from the values

        def __post_init__(self) -> None:
            if self.classes is not None and self.classes < 2:
                raise ValueError(f"classes must be >= 2, got {self.classes}")
            require(self, min_evals=">= 2")
            if self.margin < 0 or self.min_margin < 0 or self.noise_k < 0:
                raise ValueError("margin, min_margin and noise_k must be >= 0")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._percent = bool(self.config.percent)
        self._train: float | None = None  # latest training accuracy (as logged)
        self._train_best: float | None = None
        self._loss_first: list[float] = []
        self._loss_last: deque[float] = deque(maxlen=5)
        self._vals: list[tuple[int, float]] = []  # (step, val_acc as logged)
        self._trains: list[float | None] = []  # training accuracy at each evaluation
        self._start = 0  # index in _vals where the current stretch near chance begins
        self._fired: tuple[int, int] | None = None  # (step, first step of the stretch)
        self._chance = 0.0
        self._classes = 0
        self._measured = 0  # C from val_classes (live), 0 when not measured
        self._source = ""  # where the C of the finding comes from
        self._band = 0.0  # the band (as a fraction) and the noise it fired with
        self._noise = 0.0

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``carry``; the latest 256 evaluations)."""
        cut = max(0, len(self._vals) - 256)
        latest = {"_vals": _carry.encode(self._vals[cut:]), "_trains": _carry.encode(self._trains[cut:]),
                  "_start": max(0, self._start - cut)}
        return {**super().state_dict(), **latest}

    def observe(self, event: Event) -> Iterable[Finding]:
        assert isinstance(event, Scalar)
        x = event.value
        if not math.isfinite(x):
            return ()
        name = event.name
        if name == "val_classes":
            self._measured = int(x) if x >= 2 else 0
            return ()
        if name == "loss":
            if len(self._loss_first) < 5:
                self._loss_first.append(x)
            self._loss_last.append(x)
            return ()
        if x > 1.0 and self.config.percent is None:
            self._percent = True
        if name == "train_acc":
            self._train = x
            self._train_best = x if self._train_best is None else max(self._train_best, x)
            return ()
        self._vals.append((event.step, x))
        self._trains.append(self._train)
        return self._judge(event.step)

    def finish(self) -> Iterable[Finding]:
        if self._fired is None and self._vals:
            # A stretch at chance that lasts to the end, judged with all the training seen.
            self._maybe_fire(self._vals[-1][0], self._stretch())
        if self._fired is not None:
            return (self._finding(),)
        return ()

    def _scale(self) -> float:
        return 100.0 if self._percent else 1.0

    def _judge(self, step: int) -> Iterable[Finding]:
        if self._fired is not None:
            return ()
        n = len(self._vals)
        if n > _DENSE and n % (n // _DENSE):
            return ()  # a validation accuracy logged at every step: judged at every (n // _DENSE)th
        if self._vals[-1][1] / self._scale() > _ABOVE:
            self._start = n  # above any chance (1/2 and its band): no stretch ends here
            return ()
        return self._maybe_fire(step, self._stretch())

    def _stretch(self) -> Plateau | None:
        """Where the stretch near chance that ends now begins, and its plateau (None when it is
        none). A value far outside the stretch so far (beyond its noise) starts a new one; a
        stretch that is no plateau at chance (once it has ``_SETTLE`` values for its noise to be
        known) gives up its earliest values until the rest is one, or until none is left."""
        n = len(self._vals)
        self._start = max(self._start, n - _WINDOW)
        scale = self._scale()
        window = [v / scale for _, v in self._vals[self._start:]]
        if len(window) >= 2 and _exits(window[:-1], window[-1], self.config):
            self._start = n - 1
            return None
        if n - self._start < _SETTLE:
            return self._plateau(window) if n - self._start >= self.config.min_evals else None
        found = self._plateau(window)
        for _ in range(_SCAN):
            if found is not None or self._start >= n - 1:
                return found
            self._start += 1
            window = window[1:]
            found = self._plateau(window)
        if found is None:  # none of the nearest starts: the stretch begins anew near the end
            self._start = max(self._start, n - _SETTLE + 1)
        return found

    def _maybe_fire(self, step: int, found: Plateau | None) -> Iterable[Finding]:
        n = len(self._vals)
        if self._fired is not None or found is None or n - self._start < self.config.min_evals:
            return ()
        if not self._learning(found[0], found[3]):
            return ()
        floor = max(self.config.margin * found[0], self.config.min_margin)
        if found[2] == "inferred" and found[3] > floor and n - self._start < 2 * self.config.min_evals:
            return ()  # a noisy plateau says which C only over more evaluations (9 or 10?)
        self._chance, self._classes, self._source, self._band, self._noise = found
        self._fired = (step, self._vals[self._start][0])
        return (self._finding(),)

    def _plateau(self, w: list[float]) -> Plateau | None:
        """(chance, C, where C comes from, band, noise) when the accuracies ``w`` (fractions)
        are a plateau at chance, else None."""
        cfg = self.config
        n = len(w)
        m = median(w)
        noise = _noise(w)
        # The noise of the median; under 3 values it is unknown, and loose.
        slack = 2.5 * noise / math.sqrt(n) if n >= 3 else 0.25 * m
        if cfg.classes is not None:
            classes, source = cfg.classes, "config"
        elif self._measured:
            classes, source = self._measured, "measured"
        else:
            source = "inferred"
            found = _infer(m, cfg.infer_margin, slack)
            if found is None:
                return None
            classes = found
        chance = 1.0 / classes
        floor = max(cfg.margin * chance, cfg.min_margin)
        # Under 3 values the noise is unknown: a loose band keeps the stretch open until it is.
        band = max(floor, cfg.noise_k * noise) if n >= 3 else max(floor, 0.25 * chance)
        if (n >= 3 and abs(m - chance) > max(floor, slack)) or any(abs(v - chance) > band for v in w):
            return None
        if n >= 3:  # no climb out of it: the later half no higher than the earlier beyond noise
            half = n // 2
            if median(w[n - half:]) - median(w[:half]) > max(floor, 2 * noise):
                return None
        return chance, classes, source, band, noise

    def _learning(self, chance: float, band: float) -> bool:
        cfg = self.config
        if self._train is not None:
            return self._train / self._scale() >= chance + band + cfg.train_gap
        if len(self._loss_first) >= 3 and self._loss_last:
            start, now = median(self._loss_first), median(list(self._loss_last))
            return start > 0 and now <= (1 - cfg.loss_drop) * start
        return False

    def _finding(self) -> Finding:
        assert self._fired is not None
        step, first = self._fired
        scale = self._scale()
        unit = "%" if self._percent else ""
        at = [(s, v) for s, v in self._vals if s >= first]
        n = 0
        for _, v in at:
            if abs(v / scale - self._chance) > self._band:
                break
            n += 1
        shown = [fmt(v) + unit for _, v in at[:n]][:8]
        more = f" ... {len(at[:n]) - 8} more" if n > 8 else ""
        inferred = {
            "config": "",
            "measured": f" (C={self._classes}: the logits of the evaluation's loss calls, or the log's class count)",
            "inferred": f" (C={self._classes} inferred from the plateau; pass --num-classes C to be sure)",
        }[self._source]
        if self._source == "inferred" and not self._percent and self._train is None and self._classes <= 1000:
            inferred = inferred.replace(" inferred from the plateau", " inferred from the plateau, or "
                                        f"{self._classes * 100} if these values are percent")
        if self._train is not None:
            trains = [t for t in self._trains[len(self._vals) - len(at):][:n] if t is not None]
            evidence_learning = (f"while train_acc rose to {fmt(max(trains or [self._train]))}{unit}"
                                 f" (best {fmt(self._train_best or 0)}{unit})")
        else:
            evidence_learning = (f"while the training loss fell from {fmt(median(self._loss_first))} to "
                                 f"{fmt(median(list(self._loss_last)))} (train_acc not logged)")
        chance_shown = fmt(self._chance * scale) + unit
        noise = (f"; {fmt(self.config.noise_k)}x the evaluation-to-evaluation noise of "
                 f"{fmt(self._noise * scale)}{unit}" if self._band > max(self.config.margin * self._chance,
                                                                         self.config.min_margin) else "")
        return finding(
            self.id, step=step,
            message=(
                f"val_acc stayed at chance for {n} evaluations from step {first} "
                f"({', '.join(shown)}{more}; chance 1/{self._classes} = {chance_shown}, band "
                f"+-{fmt(self._band * scale)}{unit}{noise}){inferred}, {evidence_learning}."
            ),
            evidence={"classes": self._classes, "chance": self._chance * scale,
                      "evaluations_at_chance": n, "first_step": first,
                      "val_acc": [v for _, v in at[:n]][:20],
                      "train_acc": self._train, "percent": self._percent,
                      "band": self._band * scale, "noise": self._noise * scale,
                      "classes_inferred": self._source == "inferred",
                      "classes_source": self._source},
        )


def _infer(m: float, margin: float, slack: float) -> int | None:
    """The class count C whose chance 1/C the plateau's median ``m`` lies on: within ``margin``
    of 1/C or within ``slack`` (the noise of the median); a usual count first."""
    if not 0 < m <= 0.55:
        return None
    near = [c for c in _COMMON if abs(m - 1.0 / c) <= max(margin / c, slack)]
    if near:
        return near[0]
    raw = round(1.0 / m)
    if 2 <= raw <= 100_000 and abs(m - 1.0 / raw) <= max(margin / raw, slack):
        return raw
    return None


def _noise(w: list[float]) -> float:
    """The standard deviation of one value, from the spread of consecutive differences, which a
    slow trend hardly moves (median |d| / 0.6745 / sqrt(2)); 0 under 3 values."""
    return median([abs(b - a) for a, b in zip(w, w[1:])]) * 1.0483 if len(w) >= 3 else 0.0


def _exits(before: list[float], v: float, cfg: ValAtChance.Config) -> bool:
    """Is ``v`` far outside the values ``before`` it: beyond ``noise_k`` times their noise (and
    half their median while too few values tell that noise), and beyond the margins?"""
    m = median(before)
    tol = cfg.noise_k * _noise(before)
    if len(before) < _SETTLE:
        tol = max(tol, 0.5 * m)
    return abs(v - m) > max(tol, cfg.margin * m, cfg.min_margin)
