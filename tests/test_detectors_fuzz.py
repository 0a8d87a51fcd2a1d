"""Fuzzing the detectors. Whatever the stream, no detector may crash:

- live-like streams: parameters measured on random steps, whose gradient comes and goes (None,
  zero, removed by the script, NaN, huge), with requires_grad flipped, an optimizer index of -1
  (a stray gradient), one or two optimizers, and a loss that may be NaN. Its first version found
  no-gradient crashing at the end of a run where a parameter it had fired on got a gradient
  later (a warm-up freeze);
- streams of every event class with random fields of their declared types, as `traindoc
  analyze` reads a recorded file (untrusted): through ``from_dict``, which refuses what is not
  of those types or whose parallel fields differ in length. It found six more crashes, the
  cases at the end.

TRAINDOC_FUZZ=20000 for a long hunt."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import types
import typing
from typing import Any, Callable

import pytest

import traindoc.events as events_module
from traindoc.analyze import analyze
from traindoc.events import (Event, Optimizer, ParamGroup, ParamStats, RunEnd, RunStart, Scalar, ScaledClip,
                             ScheduleEnd, from_dict, to_dict)

VALUES = [0.0, 1e-12, 1e-3, 0.5, 3.0, 1e4, math.inf, math.nan, None]
DTYPES = ["torch.float32", "torch.bfloat16"]
SEEDS = int(os.environ.get("TRAINDOC_FUZZ", "300"))


def stream(rng: random.Random) -> list[Event]:
    names = [f"{rng.choice(['enc.0.weight', 'enc.0.bias', 'head.weight', 'scale'])}{i}" for i in range(rng.randint(1, 4))]
    optimizers = rng.randint(1, 2)
    owner = {n: rng.randrange(optimizers) for n in names}
    events: list[Event] = [RunStart(source="live", signals=("loss", "params", "optimizer", "grad_norm"))]
    for o in range(optimizers):
        mine = tuple(n for n in names if owner[n] == o)
        group = ParamGroup(index=0, lr=rng.choice([0.0, 1e-3, 1e-8]), names=mine,
                           dtypes=tuple(rng.choice(DTYPES) for _ in mine), numel=10 * len(mine))
        events.append(Optimizer(step=0, index=o, cls=rng.choice(["SGD", "AdamW"]), groups=(group,)))
    learns = {n: rng.random() > 0.3 for n in names}  # most steps: a gradient or not
    steps = rng.randint(1, 60)
    for s in range(steps):
        events.append(Scalar(step=s, name="loss", value=rng.choice([1.0, 0.5, 2.0, math.nan, 1.0 - s / 100])))
        if rng.random() < 0.2:
            events.append(Scalar(step=s, name="grad_norm", value=rng.choice([1.0, 0.0, 1e5, math.inf])))
        if rng.random() < 0.4:
            continue  # not a sampled step
        for n in names:
            has = rng.choice([True, False, None]) if rng.random() < 0.3 else learns[n]
            grad = (rng.choice(VALUES) or 0.0) if has else None
            events.append(ParamStats(
                step=s, name=n, dtype=rng.choice(DTYPES), numel=10, requires_grad=rng.random() > 0.1,
                norm=rng.choice([1.0, 0.0, math.nan]), grad=grad, has_grad=has,
                cleared=not has and rng.random() < 0.5, update=rng.choice(VALUES),
                unchanged=rng.choice([None, 0.0, 0.5, 1.0]), moved=rng.choice([None, 0.0, 1e-3]),
                spacing=rng.choice([None, 1e-3]), intended=rng.choice([None, 1e-4]),
                lr=rng.choice([None, 0.0, 1e-3]), optimizer=owner[n] if rng.random() > 0.05 else -1))
    events.append(RunEnd(steps=steps, status=rng.choice(["ok", "exception"])))
    return events


# ---- every event class, fields of their declared types --------------------------------------------
CLASSES = sorted((c for c in vars(events_module).values() if isinstance(c, type) and dataclasses.is_dataclass(c)
                  and hasattr(c, "signal") and c not in (events_module.Series, RunStart, RunEnd)),
                 key=lambda c: c.__name__)
WORDS = ["", "loss", "model", "enc.0.weight", "head", "train.py:10", "AdamW", "val", "ema", "ok",
         "BatchNorm2d", "exception", "torch.float32", "torch.bfloat16", "teacher", "cpu", "random"]
FLOATS = [0.0, -1.0, 1e-12, 1e-3, 0.5, 1.0, 3.0, 1e4, 1e30, math.inf, -math.inf, math.nan]


def value(rng: random.Random, hint: Any, step: int, items: int | None = None) -> Any:
    """A random value of type ``hint``; a tuple of ``items`` items (random: 0 to 3)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return value(rng, rng.choice(typing.get_args(hint)), step, items)
    if origin is tuple:
        n = rng.randint(0, 3) if items is None else items
        return tuple(value(rng, typing.get_args(hint)[0], step, items) for _ in range(n))
    if hint is ParamGroup:
        n = rng.randint(0, 3)
        return ParamGroup(index=rng.randint(0, 2), lr=rng.choice(FLOATS), names=tuple(rng.sample(WORDS, n)),
                          dtypes=tuple(rng.choice(WORDS) for _ in range(n)), numel=rng.choice([0, 10]))
    return {type(None): lambda: None, bool: lambda: rng.random() < 0.5, float: lambda: rng.choice(FLOATS),
            int: lambda: rng.choice([0, 1, 2, 3, -1, 10, step, 1000]), str: lambda: rng.choice(WORDS)}[hint]()


def any_event(rng: random.Random, cls: type, step: int, items: int | None = None) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: step if f.name == "step" and rng.random() < 0.9 else value(rng, hints[f.name], step, items)
                  for f in dataclasses.fields(cls)})


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_event_reads_back_as_written(cls: type) -> None:
    """A record holds every event as written (a field named "kind" overwrote the event's
    class in the record: a run with a legacy spectral_norm could not be replayed)."""
    rng = random.Random(0)
    for _ in range(20):
        event = any_event(rng, cls, 3, items=2)  # parallel fields alike in length
        again = from_dict(json.loads(json.dumps(to_dict(event))))
        assert type(again) is cls and repr(again) == repr(event)  # repr: NaN != NaN


def any_stream(rng: random.Random) -> list[Event]:
    """Up to four event classes at random steps, written to a record and read back: what
    ``from_dict`` refuses is left out, as ``traindoc analyze`` would stop there."""
    kinds = rng.sample(CLASSES, rng.randint(1, 4))
    made: list[Event] = [RunStart(source=rng.choice(["live", "logs", "ckpt"]), world_size=rng.choice([1, 2]))]
    steps = rng.randint(1, 50)
    for s in range(steps):
        made += [any_event(rng, rng.choice(kinds), s) for _ in range(rng.randint(0, 4))]
        made.append(Scalar(step=s, name="loss", value=rng.choice(FLOATS[:6])))
    made.append(RunEnd(steps=steps, status=rng.choice(["ok", "exception"])))
    kept = []
    for e in made:
        try:
            kept.append(from_dict(json.loads(json.dumps(to_dict(e)))))
        except ValueError:
            continue
    return kept


@pytest.mark.parametrize("make", [stream, any_stream], ids=["live-like", "any-record"])
@pytest.mark.parametrize("block", range(3))
def test_no_detector_crashes(make: Callable[[random.Random], list[Event]], block: int) -> None:
    for seed in range(block, SEEDS, 3):
        report = analyze(make(random.Random(seed)))
        assert not report.disabled, f"seed {seed}: {report.disabled}"


# ---- cases a wider fuzz (every event class, random fields) found that a live run can reach ----
def test_a_schedule_whose_peak_lr_is_0_is_not_judged() -> None:
    """An optimizer built with lr=0 under a torch scheduler (the LR is set by hand elsewhere):
    cutting its schedule short changes nothing, and its share of the peak is 0/0."""
    end = ScheduleEnd(step=9, scheduler="CosineAnnealingLR", optimizer="SGD", taken=10, horizon=100,
                      attribute="T_max", lr_now=0.0, lr_peak=0.0)
    report = analyze([RunStart(source="live"), end, RunEnd(steps=10)])
    assert not report.disabled and not report.findings


def test_a_clip_under_a_scale_of_0_is_not_measured() -> None:
    """A GradScaler whose scale halved to 0 after every step overflowed (grad-scaler-collapse's
    failure) gives no factor to compare the clipping with."""
    clips = [ScaledClip(step=s, fn="clip_grad_value_", max_norm=1.0, scale=0.0) for s in range(3)]
    report = analyze([RunStart(source="live"), *clips, RunEnd(steps=3)])
    assert not report.disabled
