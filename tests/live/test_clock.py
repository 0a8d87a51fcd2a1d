"""The step clock on its own: rounds, outcomes and sampling, told by hand what happened (no
torch, no hooks), as a probe or a framework integration would see them."""

from __future__ import annotations

from typing import Any

from traindoc.events import NO_GRADS, SKIPPED_BY_SCALER, SKIPPED_BY_SCRIPT, STEPPED
from traindoc.live.clock import StepClock
from traindoc.live.levels import LEVELS, Level
from traindoc.live.probes.base import Probe

A, B = 101, 202  # two optimizers' keys (their ids in a run)


def _clock(level: Level = LEVELS["standard"], routine: bool = False) -> tuple[StepClock, list[Any], list[bool]]:
    stream: list[Any] = []
    closes: list[bool] = []
    return StepClock(level, stream, routine=routine, on_close=closes.append), stream, closes


def _step(clock: StepClock, key: int = A, index: int = 0, stepped: bool | None = True) -> None:
    clock.step_begins(key)
    clock.step_ended(key, index, stepped)


def _ends(stream: list[Any]) -> list[tuple[int, list[Any]]]:
    return [(m[1], m[2]) for m in stream if m[2] is not None]


def test_a_plain_loop_ends_one_round_per_step_at_the_next_backward() -> None:
    clock, stream, closes = _clock()
    for _ in range(3):
        assert clock.backward() == 0
        _step(clock)
        assert clock.current_step == clock.step + 1  # work after the step is the next step's
    clock.finish()
    assert _ends(stream) == [(0, [(0, STEPPED, 1)]), (1, [(0, STEPPED, 2)]), (2, [(0, STEPPED, 3)])]
    assert closes == [True, True]  # the last round ended by finish(), not by a backward
    assert clock.steps_taken == 3


def test_micro_batches_count_inside_one_round() -> None:
    clock, _, _ = _clock()
    assert [clock.backward() for _ in range(4)] == [0, 1, 2, 3]
    _step(clock)
    assert clock.backward() == 0 and clock.step == 1


def test_two_optimizers_share_a_round_and_a_second_step_of_one_opens_the_next() -> None:
    clock, stream, _ = _clock()
    clock.backward()
    _step(clock, A, 0)
    _step(clock, B, 1)  # a GAN's second optimizer: the same round
    assert clock.step == 0
    _step(clock, A, 0)  # A again with no backward between (LBFGS, a step taken twice)
    assert clock.step == 1
    clock.finish()
    assert _ends(stream) == [(0, [(0, STEPPED, 1), (1, STEPPED, 1)]), (1, [(0, STEPPED, 2)])]


def test_outcomes_skipped_no_gradients_and_dropped() -> None:
    clock, stream, _ = _clock()
    clock.backward()
    _step(clock, stepped=None)  # a GradScaler skipped it
    clock.backward()
    _step(clock, stepped=False)  # stepped with no gradients
    clock.backward()
    clock.cleared()  # the script dropped this one: zero_grad, no step
    clock.backward()
    clock.finish()
    assert _ends(stream) == [(0, [(0, SKIPPED_BY_SCALER, 0)]), (1, [(0, NO_GRADS, 0)]),
                             (2, [(-1, SKIPPED_BY_SCRIPT, 0)]), (3, [(-1, SKIPPED_BY_SCRIPT, 0)])]
    assert clock.steps_taken == 0


def test_sampling_follows_the_level_and_tells_subscribers_when_it_changes() -> None:
    level = Level(dense=2, every=3, activations=True)
    clock, _, closes = _clock(level)

    class Watcher(Probe):
        def __init__(self) -> None:  # no session: the clock alone
            self.changes: list[tuple[int, bool]] = []
            self.sampled_ends: list[int] = []

        def on_sampling(self, on: bool) -> None:
            self.changes.append((clock.step, on))

        def on_sampled_round_end(self, step: int) -> None:
            self.sampled_ends.append(step)

    watcher = Watcher()
    clock.subscribe(watcher)
    clock.subscribe(watcher)  # once, however often
    seen = []
    for _ in range(8):
        clock.backward()
        seen.append(clock.sampled)
        _step(clock)
    assert seen == [level.sampled(s) for s in range(8)] == [True, True, False, True, False, False, True, False]
    # told while the round that precedes the change is still open (its step ended)
    assert watcher.changes == [(1, False), (2, True), (3, False), (5, True), (6, False)]
    assert watcher.sampled_ends == [0, 1, 3, 6]
    assert closes == seen[:7]
    clock.unsubscribe(watcher)
    assert not clock.sampling_listeners and not clock.sampled_round_listeners


def test_default_hooks_are_never_subscribed() -> None:
    clock, _, _ = _clock()

    class Quiet(Probe):
        def __init__(self) -> None:
            pass

    clock.subscribe(Quiet())
    assert not (clock.sampling_listeners or clock.round_listeners or clock.sampled_round_listeners
                or clock.first_step_listeners)


def test_first_step_listeners_run_once() -> None:
    clock, _, _ = _clock()
    calls: list[Any] = []
    clock.first_step_listeners = [calls.append]
    clock.first_step("opt")
    clock.first_step("opt")
    assert calls == ["opt"]


def test_resume_moves_the_steps_on_before_training_only() -> None:
    clock, stream, _ = _clock(routine=True)
    assert clock.resume_at(1000)
    assert clock.step == 1000 and clock.sampled == LEVELS["standard"].sampled(1000)
    assert stream == [(None, 1000, None)]  # the resumed step begins
    clock.backward()
    assert not clock.resume_at(2000)  # training began: nothing changes
    _step(clock)
    clock.finish()
    assert _ends(stream) == [(1000, [(0, STEPPED, 1)])]


def test_round_listeners_see_every_step_before_the_counter_moves_on() -> None:
    clock, _, _ = _clock()
    steps: list[int] = []

    def listener(step: int) -> None:
        steps.append(step)
        assert clock.step == step

    clock.listen_round(listener)
    for _ in range(3):
        clock.backward()
        _step(clock)
    clock.backward()
    clock.unlisten_round(listener)
    clock.backward()
    assert steps == [0, 1, 2]


def test_the_clock_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, traindoc.live.clock; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
