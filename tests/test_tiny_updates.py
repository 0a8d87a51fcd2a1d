"""tiny-updates judges an update at the LR its schedule asked for: updates that shrink because a
schedule decays to its floor, or a resumed run's converged tail, are not tiny updates; a run
whose LR is too low all along is. Synthetic event streams, replayed without torch."""

from __future__ import annotations

import math
from typing import Callable

from traindoc.analyze import analyze
from traindoc.events import (
    Classification, Event, Optimizer, ParamGroup, ParamStats, RunEnd, RunStart, Scalar, StateLoad,
)

STEPS = 200
SAMPLED = [s for s in range(STEPS) if s < 16 or s % 25 == 0]  # the live face's standard level


def stream(lr: Callable[[int], float], ratio_per_lr: float, loss: Callable[[int], float], *,
           classes: int = 0, resumed: bool = False, first_lr: float | None = None,
           sampled: list[int] = SAMPLED, lr_known: bool = True) -> list[Event]:
    """One AdamW group whose relative update is ``ratio_per_lr * lr(step)`` (an Adam step moves
    each weight by about the LR), with the live face's sampling."""
    events: list[Event] = [RunStart(source="live")]
    if resumed:
        events.append(StateLoad(step=0, target="optimizer", cls="AdamW", before=(3e-3,), after=(4e-4,)))
    group = ParamGroup(index=0, lr=lr(0) if first_lr is None else first_lr, names=("w",),
                       dtypes=("torch.float32",), numel=1024)
    events.append(Optimizer(step=0, index=0, cls="AdamW", groups=(group,)))
    for s in range(STEPS):
        if classes:
            events.append(Classification(step=s, classes=classes, value=loss(s)))
        if s in sampled:
            if lr_known:
                events.append(Scalar(step=s, name="lr", value=lr(s)))
            events.append(ParamStats(step=s, name="w", dtype="torch.float32", numel=1024, requires_grad=True,
                                     norm=1.0, grad=0.1, has_grad=True, update=ratio_per_lr * lr(s),
                                     lr=lr(s) if lr_known else None))
        events.append(Scalar(step=s, name="loss", value=loss(s)))
    events.append(RunEnd(steps=STEPS))
    return events


def fired(events: list[Event]) -> dict[str, object]:
    report = analyze(events, select=["tiny-updates"])
    assert not report.disabled, report.disabled
    return {f.id: f for f in report.findings}


def cosine(peak: float, floor: float, warmup: int = 10) -> Callable[[int], float]:
    def lr(s: int) -> float:
        if s < warmup:
            return peak * (s + 1) / (warmup + 1)
        return floor + 0.5 * (1 + math.cos(math.pi * (s - warmup) / (STEPS - warmup))) * (peak - floor)
    return lr


def flat(value: float) -> Callable[[int], float]:
    return lambda s: value


def falling(start: float, end: float) -> Callable[[int], float]:
    return lambda s: start + (end - start) * s / STEPS


def test_a_schedule_decaying_to_zero_is_not_tiny_updates() -> None:
    # 3e-3 peak, cosine to 0: the last updates are far below 1e-5, as the schedule asks
    events = stream(cosine(3e-3, 0.0), 0.3, falling(3.0, 1.0))
    assert "tiny-updates" not in fired(events)


def test_updates_are_judged_at_the_peak_lr_of_the_schedule() -> None:
    # a resumed run's last steps, every step sampled (--level thorough): the LR falls linearly
    # from 1e-4 to zero, so the second half's raw updates (median ~7e-6) are below `far`
    every = list(range(STEPS))
    linear = falling(1e-4, 0.0)
    assert "tiny-updates" not in fired(stream(linear, 0.3, flat(1.2), resumed=True, sampled=every))
    blind = stream(linear, 0.3, flat(1.2), resumed=True, sampled=every, lr_known=False)
    assert "tiny-updates" in fired(blind)  # without the LR per step, only the raw size is known


def test_a_low_lr_all_along_fires_with_the_peak_lr() -> None:
    events = stream(cosine(2e-5, 2e-6), 0.3, flat(4.0))  # 6e-6 per step at the peak, loss flat
    f = fired(events)["tiny-updates"]
    assert f.step == 0 and "2.00e-05 at its peak" in f.message  # type: ignore[attr-defined]
    assert f.evidence["peak_lr"] == [2e-5]  # type: ignore[attr-defined]


def test_a_resumed_tail_at_its_floor_is_judged_by_far_only() -> None:
    # a resume near the end: the LR sits near its floor (4e-4 -> 3e-4), updates ~1e-4 of that,
    # the loss is flat because the run converged
    tail = stream(falling(4e-4, 3e-4), 0.15, flat(1.2), resumed=True)
    assert "tiny-updates" not in fired(tail)
    same_from_scratch = stream(falling(4e-4, 3e-4), 0.15, flat(1.2))
    assert "tiny-updates" in fired(same_from_scratch)  # flat loss, no resume: not training


def test_trained_weights_are_told_by_a_cross_entropy_below_chance() -> None:
    # no load seen (the script set its own LR after loading), but the cross-entropy starts at
    # 1.2 with 64 classes (chance 4.16): the weights were trained before this run
    converged = stream(falling(4e-4, 3e-4), 0.15, flat(1.2), classes=64)
    assert "tiny-updates" not in fired(converged)
    at_chance = stream(falling(4e-4, 3e-4), 0.15, flat(4.15), classes=64)
    assert "tiny-updates" in fired(at_chance)


def test_far_below_the_band_fires_even_after_a_resume() -> None:
    events = stream(flat(1e-6), 1.0, flat(1.2), resumed=True)  # 1e-6 per step: a stale, tiny LR
    f = fired(events)["tiny-updates"]
    assert f.evidence["started_trained"] is True  # type: ignore[attr-defined]


def test_a_warmup_from_zero_is_not_a_zero_lr_but_zero_throughout_is() -> None:
    warm = stream(lambda s: 0.0 if s == 0 else 2e-5, 0.3, flat(4.0), first_lr=0.0)
    assert "tiny-updates" in fired(warm)  # the LR at the first step was 0, then 2e-5: judged
    zero = stream(flat(0.0), 0.3, flat(4.0))
    assert "tiny-updates" not in fired(zero)  # frozen-parameters' territory


def test_a_negative_loss_has_no_relative_progress() -> None:
    """An actor's loss is -Q (Stable-Baselines3's SAC: -0.05 at the start, -14 at the end): no
    "improved by 27,900%"; 1e-8 per step is far below the band all the same."""
    negative = fired(stream(flat(1e-9), 10.0, falling(-0.05, -14.0)))["tiny-updates"]
    assert "improved" not in negative.message  # type: ignore[attr-defined]
    assert negative.evidence["loss_improvement"] is None  # type: ignore[attr-defined]
    positive = fired(stream(flat(1e-9), 10.0, falling(3.0, 2.9)))["tiny-updates"]
    assert "the loss improved by only 3.2%" in positive.message  # type: ignore[attr-defined]
