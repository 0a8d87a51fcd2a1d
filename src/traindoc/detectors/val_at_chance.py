"""val-at-chance: validation accuracy stays at chance (1/C) while the model learns."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import ClassVar, Iterable, Mapping

from traindoc.detectors import _carry
from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar
from traindoc.findings import Finding


# What carries over a resume (Engine.state_dict): the evaluations (the latest 256, each with the
# training accuracy then), the first and latest losses, the streak at chance and where it fired,
# and the class count.
_CARRIED = ("_percent", "_train", "_train_best", "_loss_first", "_loss_last", "_vals", "_trains",
            "_streak", "_fired", "_chance", "_classes", "_measured", "_source")


class ValAtChance:
    """``min_evals`` consecutive validation accuracies lie within ``margin`` of chance (1/C)
    while the model learns: training accuracy clearly above chance (``train_gap`` above the
    band), or, when no training accuracy is logged, a training loss ``loss_drop`` below its
    start. C comes from ``classes`` (``--num-classes``), else from ``val_classes`` (live: the
    number of logits of the evaluation's loss calls); without either, a plateau whose median
    is within ``infer_margin`` of 1/C for a whole number C is read as chance (0.1% for 1000
    classes, 50% for 2), and the message asks for C.

    Accuracies in percent are handled: ``percent`` says which unit the source logged (the logs
    face tells it from the whole log's accuracy columns); left None, any value above 1 seen so
    far means percent.
    """

    id: ClassVar[str] = "val-at-chance"
    needs: ClassVar[frozenset[str]] = frozenset({"val_acc"})
    uses: ClassVar[frozenset[str]] = frozenset({"train_acc", "loss", "val_classes"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("fixtures/logs/golden/val_at_chance.jsonl", 2),
        Example("fixtures/logs/golden/val_at_chance_percent.jsonl", 2),
        Example("live_eval_metrics/golden/val_at_chance_printed.jsonl", 96),
        Example("live_eval_metrics/golden/val_at_chance_derived.jsonl", 96),
        Example("zoo/val_at_chance_label_order.py", 96),
        Example("fixtures/logs/golden/healthy_val_acc.jsonl", None),
        Example("live_eval_metrics/golden/healthy_label_order.jsonl", None),
        Example("zoo/healthy_label_order.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        classes: int | None = None  # C; None: inferred from a plateau at 1/C
        margin: float = 0.1  # band around chance, as a share of chance ...
        min_margin: float = 0.005  # ... but at least this (absolute, accuracy in [0, 1])
        infer_margin: float = 0.03  # without classes: the plateau's median this close to 1/C
        min_evals: int = 3
        train_gap: float = 0.1  # training accuracy this far above the band (absolute)
        loss_drop: float = 0.3  # or the training loss this share below its start
        percent: bool | None = None  # accuracies logged in percent; None: told from the values

        def __post_init__(self) -> None:
            if self.classes is not None and self.classes < 2:
                raise ValueError(f"classes must be >= 2, got {self.classes}")
            if self.min_evals < 2:
                raise ValueError(f"min_evals must be >= 2, got {self.min_evals}")
            if self.margin < 0 or self.min_margin < 0:
                raise ValueError("margin and min_margin must be >= 0")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._percent = bool(self.config.percent)
        self._train: float | None = None  # latest training accuracy (as logged)
        self._train_best: float | None = None
        self._loss_first: list[float] = []
        self._loss_last: deque[float] = deque(maxlen=5)
        self._vals: list[tuple[int, float]] = []  # (step, val_acc as logged)
        self._trains: list[float | None] = []  # training accuracy at each evaluation
        self._streak = 0
        self._fired: tuple[int, int] | None = None  # (step, first step of the streak)
        self._chance = 0.0
        self._classes = 0
        self._measured = 0  # C from val_classes (live), 0 when not measured
        self._source = ""  # where the C of the finding comes from

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``_CARRIED``; the latest 256 evaluations)."""
        latest = {"_vals": _carry.encode(self._vals[-256:]), "_trains": _carry.encode(self._trains[-256:])}
        return {**_carry.save(self, _CARRIED), **latest}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        _carry.load(self, state, _CARRIED)

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
        if self._fired is not None:
            return (self._finding(),)
        return ()

    def _scale(self) -> float:
        return 100.0 if self._percent else 1.0

    def _band(self, chance: float) -> float:
        return max(self.config.margin * chance, self.config.min_margin)

    def _judge(self, step: int) -> Iterable[Finding]:
        cfg = self.config
        scale = self._scale()
        v = self._vals[-1][1] / scale
        if cfg.classes is not None:
            chance, classes, source = 1.0 / cfg.classes, cfg.classes, "config"
        elif self._measured:
            chance, classes, source = 1.0 / self._measured, self._measured, "measured"
        else:
            source = "inferred"
            recent = [val / scale for _, val in self._vals[-cfg.min_evals:]]
            m = median(recent)
            if not m > 0:
                self._streak = 0
                return ()
            classes = round(1.0 / m)
            chance = 1.0 / classes if 2 <= classes <= 100_000 else math.nan
            if not abs(m - chance) <= cfg.infer_margin * chance:
                self._streak = 0
                return ()
        if abs(v - chance) <= self._band(chance):
            self._streak += 1
        else:
            self._streak = 0
            return ()
        if self._fired is not None or self._streak < cfg.min_evals or not self._learning(chance):
            return ()
        self._chance, self._classes, self._source = chance, classes, source
        first = self._vals[-self._streak][0]
        self._fired = (step, first)
        return (self._finding(),)

    def _learning(self, chance: float) -> bool:
        cfg = self.config
        if self._train is not None:
            return self._train / self._scale() >= chance + self._band(chance) + cfg.train_gap
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
            if abs(v / scale - self._chance) > self._band(self._chance):
                break
            n += 1
        shown = [fmt(v) + unit for _, v in at[:n]][:8]
        inferred = {
            "config": "",
            "measured": f" (C={self._classes}: the logits of the evaluation's loss calls)",
            "inferred": f" (C={self._classes} inferred from the plateau; pass --num-classes C to be sure)",
        }[self._source]
        if self._train is not None:
            trains = [t for t in self._trains[len(self._vals) - len(at):][:n] if t is not None]
            evidence_learning = (f"while train_acc rose to {fmt(max(trains or [self._train]))}{unit}"
                                 f" (best {fmt(self._train_best or 0)}{unit})")
        else:
            evidence_learning = (f"while the training loss fell from {fmt(median(self._loss_first))} to "
                                 f"{fmt(median(list(self._loss_last)))} (train_acc not logged)")
        chance_shown = fmt(self._chance * scale) + unit
        return finding(
            self.id, step=step,
            message=(
                f"val_acc stayed at chance for {n} evaluations from step {first} "
                f"({', '.join(shown)}; chance 1/{self._classes} = {chance_shown}, band "
                f"+-{fmt(self._band(self._chance) * scale)}{unit}){inferred}, {evidence_learning}."
            ),
            evidence={"classes": self._classes, "chance": self._chance * scale,
                      "evaluations_at_chance": n, "first_step": first,
                      "val_acc": [v for _, v in at[:n]][:20],
                      "train_acc": self._train, "percent": self._percent,
                      "classes_inferred": self._source == "inferred",
                      "classes_source": self._source},
        )
