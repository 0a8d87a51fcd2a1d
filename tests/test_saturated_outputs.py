"""saturated-outputs judges each sampled step once, over all of an output's forwards at that
step, and weighs it by the steps of the run it stands for: a GAN's discriminator scoring an
all-real and an all-fake batch apart, and an init transient over the densely sampled first
steps, are not saturation; a model stuck at 0.5 on every batch is, however many forwards a step
makes. Synthetic event streams, replayed without torch."""

from __future__ import annotations

from typing import Callable

from traindoc.analyze import analyze
from traindoc.events import LOSS_INPUT, Activation, Event, LossOnProbabilities, RunEnd, RunStart

ID = "saturated-outputs"
Batch = tuple[float, float, float]  # spread across the batch, low, high


def standard(step: int) -> bool:
    """The live face's standard level: every step below 16, then every 25th."""
    return step < 16 or step % 25 == 0


def stream(steps: int, forwards: Callable[[int], list[Batch]],
           sampled: Callable[[int], bool] = standard) -> list[Event]:
    """The probabilities a BCE loss sees, one Activation per forward on each sampled step."""
    events: list[Event] = [RunStart(source="live")]
    for s in range(steps):
        if sampled(s):
            events += [Activation(step=s, module="binary_cross_entropy", type=LOSS_INPUT, spread=sp,
                                  scale=sp, lo=lo, hi=hi, is_output=True) for sp, lo, hi in forwards(s)]
    events.append(RunEnd(steps=steps))
    return events


def fired(events: list[Event]) -> dict[str, int | None]:
    return {f.id: f.step for f in analyze(events, select=[ID]).findings}


def test_a_discriminator_scoring_real_and_fake_apart_is_not_saturated() -> None:
    """D's step scores a real and a fake batch with the same weights, G's step the fakes again.
    After an init transient at 0.5, each batch varies by less than the threshold (one class
    each) but the two batches sit apart: D depends on its input."""
    def forwards(s: int) -> list[Batch]:
        if s < 40:
            return [(3e-4, 0.4988, 0.5009), (5e-5, 0.4999, 0.5002)][: 2 if s % 2 == 0 else 1]
        real, fake = (0.006, 0.56, 0.58), (0.005, 0.52, 0.55)
        return [real, fake] if s % 2 == 0 else [fake]

    events = stream(600, forwards)
    assert all(a.spread is not None and a.spread < 0.01 for a in events if isinstance(a, Activation))
    assert ID not in fired(events)


def test_a_stuck_model_fires_however_many_forwards_a_step_makes() -> None:
    """Two micro-batches per step from one distribution: their ranges overlap, both at 0.5."""
    events = stream(200, lambda s: [(0.003, 0.49, 0.51), (0.003, 0.491, 0.509)])
    assert fired(events) == {ID: 0}


def test_an_init_transient_over_the_dense_first_steps_is_not_saturation() -> None:
    """Saturated up to step 75 of 200: 19 of the 23 sampled steps, but 76 of the 200 steps."""
    events = stream(200, lambda s: [(0.002, 0.499, 0.501)] if s <= 75 else [(0.05, 0.2, 0.8)])
    assert sum(isinstance(e, Activation) and e.step <= 75 for e in events) >= 0.8 * 23
    assert ID not in fired(events)


def test_the_early_verdict_covers_the_run_not_only_its_first_samples() -> None:
    """Every step sampled (thorough level): 60 saturated steps, then 240 that are not."""
    events = stream(300, lambda s: [(0.002, 0.499, 0.501)] if s < 60 else [(0.05, 0.2, 0.8)],
                    sampled=lambda s: True)
    assert ID not in fired(events)


def test_saturated_all_along_fires_at_step_0_on_every_sampling() -> None:
    for sampled in (standard, lambda s: True):
        assert fired(stream(300, lambda s: [(0.002, 0.499, 0.501)], sampled)) == {ID: 0}


def test_a_collapse_mid_run_fires_from_where_it_began() -> None:
    """A policy that learned for 300 steps, then put probability ~1 on one action in every
    state for the 600 after (pytorch/examples' actor-critic): two thirds of the run, under the
    80% the whole-run verdict needs, but a stretch of 25 sampled steps in a row over half the
    run. Reported at the stretch's start, not at the init's first steps."""
    collapse = stream(900, lambda s: [(0.05, 0.2, 0.8)] if s < 300 else [(1e-4, 0.0, 1.0)])
    assert fired(collapse) == {ID: 300}
    finding = analyze(collapse, select=[ID]).findings[0]
    assert finding.evidence["longest_from"] == 300 and "sit at 0 and 1" in finding.cause
    brief = stream(900, lambda s: [(0.05, 0.2, 0.8)] if not 300 <= s < 600 else [(1e-4, 0.0, 1.0)])
    assert ID not in fired(brief)  # a third of the run: not a collapse that lasted


def test_probabilities_a_cross_entropy_takes_for_logits_are_left_to_that_finding() -> None:
    """A model ending in a softmax whose output goes to nn.CrossEntropyLoss: its six shares
    stay within 0.02 of 1/6 for 260 of 500 steps (jindongwang's HAR CNN), because the loss's
    gradient through them fades. cross-entropy-on-probabilities reports the cause; the same
    stretch in a run with no such loss is saturation."""
    def forwards(s: int) -> list[Batch]:
        return [(6e-4, 0.160, 0.177)] if s < 260 else [(0.2, 0.0, 1.0)]

    plain = stream(500, forwards)
    assert fired(plain) == {ID: 0}
    taken = plain[:1] + [LossOnProbabilities(step=0, loss="cross_entropy", classes=6, shape="[64, 6]", dim=1)]
    assert ID not in fired(taken + plain[1:])
