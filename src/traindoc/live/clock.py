"""The step clock: which step the work happening now belongs to, and how each step ended.

A step "round" holds at most one ``step()`` per optimizer. The round closes at the next
``backward()`` after an optimizer stepped, when an optimizer steps a second time (several
optimizers, GANs, LBFGS closures all fit this rule), or when the gradients are cleared after a
backward without any step (the script skipped the step). Each round ends in the event stream
with one outcome per optimizer (stepped, skipped by a GradScaler, skipped by the script, no
gradients), always after the round's own measurements: detectors judge a step knowing its outcome.

The clock knows no torch and no hook: the session tells it what happened (a backward began, an
optimizer's step began or ended, the gradients were cleared) and it answers which step that is,
whether it is sampled, and writes the lifecycle markers into the stream it shares with the
session. Probes subscribe to it (``subscribe``) with the hooks they override of
``live.probes.base.Probe``; anything else listens to round ends with ``listen_round``.
"""

from __future__ import annotations

from typing import Any, Callable

from traindoc.events import NO_GRADS, SKIPPED_BY_SCALER, SKIPPED_BY_SCRIPT, STEPPED
from traindoc.live.levels import Level

# A lifecycle marker in the session's stream, a tuple like its deferred measurements but with
# None where those hold their tensor (made at every step: a tuple, not an object):
# (None, step, outcomes): the round ``step`` ended; its loss, gradient norm and outcomes are
# emitted once the values before it are decoded. (None, step, None): ``step`` begins.
Outcome = tuple[int, str, int]  # (optimizer index, outcome, steps it has taken so far)
Marker = tuple[None, int, "list[Outcome] | None"]

# The hooks a probe may override (``live.probes.base.Probe``), and the clock's lists that call them.
_LISTS = {
    "on_sampling": "sampling_listeners",
    "on_round_end": "round_listeners",
    "on_sampled_round_end": "sampled_round_listeners",
    "on_first_step": "first_step_listeners",
}
CLOCK_HOOKS = tuple(_LISTS)


class StepClock:
    def __init__(self, level: Level, stream: list[Any], *, routine: bool,
                 on_close: Callable[[bool], None] = lambda sampled: None) -> None:
        self.level = level
        # Where lifecycle markers go (the session's pending stream, never rebound).
        self._stream = stream
        # Begin markers are one event per step: written only when something reads them.
        self.routine = routine
        # Called as a round closes, after its end marker, with whether it was sampled (the
        # session reads its measurements back then).
        self._on_close = on_close
        self.step = 0
        self.round_done = False  # an optimizer stepped in this round
        self.sampled = self.next_sampled = level.sampled(0)
        # Is the work happening now on a sampled step? (``next_sampled`` once an optimizer
        # stepped in this round, else ``sampled``: a plain attribute, read many times a step)
        self.measuring = self.sampled
        self.micro = 0  # backward() calls in this round
        self.forwards = 0  # a model's training forwards since the last backward (sampled steps)
        self.rows = 0  # the most rows one of them saw (1: one sample; 0: not known)
        self.forward_calls = 0  # the same forwards in the run, never reset
        # The batch sizes the model or a copy of it ran on in train mode without gradients since
        # the last backward (sampled steps): a TD target when one is the training batch's size.
        self.inferred_rows: set[int] = set()
        # The user's backward calls in the run, counted where every one passes (the session's
        # backward entry, before it runs: from several tensors too, unlike ``backward``).
        self.backwards = 0
        # While a step handed a closure runs (LBFGS): (the optimizer's key, ``backwards`` as
        # it began). Its evaluations are the backward calls since.
        self.closure: tuple[int, int] | None = None
        # A model's forward is running (a sampled step's forward hooks say so): an op seen now
        # is the model's own, not the loss built from its output.
        self.in_forward = False
        self.trained = False  # a backward or an optimizer step was seen
        self.taken: dict[int, int] = {}  # optimizer index -> steps that took effect
        self._stepped: set[int] = set()  # keys of the optimizers that stepped in this round
        self._outcomes: list[Outcome] = []
        self._ended = 0  # outcomes of this round already ended in the stream
        self._cleared = False  # gradients cleared since this round's last backward
        # Subscribers, in the order they subscribed (rebuilt, never mutated, so a list being
        # run is never disturbed).
        self.sampling_listeners: list[Callable[[bool], None]] = []
        self.round_listeners: list[Callable[[int], None]] = []
        self.sampled_round_listeners: list[Callable[[int], None]] = []
        self.first_step_listeners: list[Callable[[Any], None]] = []

    # ---- reading the clock -------------------------------------------------------------------
    @property
    def current_step(self) -> int:
        """The step that work happening now belongs to (the next one once an optimizer stepped)."""
        return self.step + 1 if self.round_done else self.step

    @property
    def steps_taken(self) -> int:
        """Optimizer steps that took effect, all optimizers together."""
        return sum(self.taken.values())

    # ---- subscribing -------------------------------------------------------------------------
    def subscribe(self, probe: Any) -> None:
        """Call ``probe``'s clock hooks that it overrides (see ``live.probes.base.Probe``)."""
        for hook in CLOCK_HOOKS:
            fn = _overridden(probe, hook)
            if fn is not None and fn not in getattr(self, _LISTS[hook]):
                setattr(self, _LISTS[hook], [*getattr(self, _LISTS[hook]), fn])

    def unsubscribe(self, probe: Any) -> None:
        for hook in CLOCK_HOOKS:
            fn = _overridden(probe, hook)
            if fn is not None:
                setattr(self, _LISTS[hook], [f for f in getattr(self, _LISTS[hook]) if f != fn])

    def listen_round(self, listener: Callable[[int], None]) -> None:
        """Call ``listener`` at the end of each round from now on (once, however often asked):
        for work at a round's end only after something happened."""
        if listener not in self.round_listeners:
            self.round_listeners = [*self.round_listeners, listener]

    def unlisten_round(self, listener: Callable[[int], None]) -> None:
        if listener in self.round_listeners:
            self.round_listeners = [fn for fn in self.round_listeners if fn != listener]

    # ---- what happened -------------------------------------------------------------------------
    def backward(self) -> int:
        """A backward begins: it closes the round if a step ended it, or if the script dropped
        it (gradients cleared, no step). Returns its index among the round's backward calls."""
        if self.round_done or self._cleared:
            self.close_round()
        micro = self.micro
        self.micro = micro + 1
        self.trained = True
        return micro

    def cleared(self) -> None:
        """The script cleared the gradients."""
        if self.micro and not self.round_done:
            self._cleared = True

    def first_step(self, opt: Any) -> None:
        """The run's first optimizer step is about to run (the model is built by then)."""
        if self.first_step_listeners:
            listeners, self.first_step_listeners = self.first_step_listeners, []
            for listener in listeners:
                listener(opt)

    def step_begins(self, key: int) -> None:
        """A step of optimizer ``key`` (its ``id``) begins: it ends the round if that optimizer
        stepped in it already (no backward between: several optimizers, LBFGS, a step twice)."""
        if self.round_done and key in self._stepped:
            self.close_round()

    def step_ended(self, key: int, index: int, stepped: bool | None) -> None:
        """Optimizer ``key`` (stream index ``index``) ended its part of this round: it stepped
        (True), stepped with no gradient (False) or was skipped by a GradScaler (None)."""
        first = not self.round_done
        self._stepped.add(key)
        self.round_done = True
        self.trained = True
        taken = self.taken.get(index, 0)
        if stepped:
            taken += 1
            self.taken[index] = taken
        outcome = STEPPED if stepped else NO_GRADS if stepped is False else SKIPPED_BY_SCALER
        self._outcomes.append((index, outcome, taken))
        if first:  # is the next step sampled?
            self.next_sampled = self.measuring = self.level.sampled(self.step + 1)
            if self.level.activations and self.next_sampled != self.sampled:  # hooks go on or off
                self._sampling(self.next_sampled)

    def resume_at(self, step: int) -> bool:
        """The run resumed at ``step``: steps go on from there, and the sampled steps are those
        the uninterrupted run would sample. Only before the first step (later, or going
        backwards, it changes nothing: returns False)."""
        if step <= self.step or self.trained or self.round_done or self.micro:
            return False
        self.step = step
        sampled = self.level.sampled(step)
        if self.level.activations and sampled != self.sampled:
            self._sampling(sampled)
        self.sampled = self.next_sampled = self.measuring = sampled
        if self.routine:
            self._stream.append((None, step, None))
        return True

    # ---- ending rounds -------------------------------------------------------------------------
    def mark_end(self, begin_next: bool = True) -> None:
        """End the current round in the stream for the optimizers that stepped in it so far,
        then begin the next: the next step's measurements (its forward pass runs before the
        backward that closes this round) must not overtake this step's end. An optimizer that
        steps later in the same round gets an end of its own."""
        if not self.round_done or self._ended >= len(self._outcomes):
            return
        first = self._ended == 0
        self._stream.append((None, self.step, self._outcomes[self._ended:]))
        self._ended = len(self._outcomes)
        if first and begin_next and self.routine:
            self._stream.append((None, self.step + 1, None))

    def end_dropped(self, begin_next: bool = True) -> None:
        """End a round in which backward ran and no optimizer stepped (the script dropped it)."""
        self._stream.append((None, self.step, [(-1, SKIPPED_BY_SCRIPT, 0)]))
        if begin_next and self.routine:
            self._stream.append((None, self.step + 1, None))

    def close_round(self) -> None:
        step, sampled = self.step, self.sampled
        if self._outcomes:
            self.mark_end()
        else:
            self.end_dropped()
        self._on_close(sampled)
        for listener in self.round_listeners:
            listener(step)
        if sampled:
            for listener in self.sampled_round_listeners:
                listener(step)
        self.step = step + 1
        self.round_done = False
        self._stepped.clear()
        self._outcomes = []
        self._ended = 0
        self.micro = 0
        self._cleared = False
        self.sampled = self.measuring = self.next_sampled

    def finish(self) -> None:
        """The run ended: end its last round (no next step begins)."""
        if self._outcomes:
            self.mark_end(begin_next=False)
        elif self.micro:
            self.end_dropped(begin_next=False)

    def stop_sampling(self) -> None:
        """Sampled-only instruments come down for good (a torch.compile'd model)."""
        self._sampling(False)

    def _sampling(self, on: bool) -> None:
        for listener in self.sampling_listeners:
            listener(on)


def _overridden(obj: Any, hook: str) -> Callable[..., Any] | None:
    """``obj``'s bound ``hook`` when its class overrides the no-op default, else None (a
    default is never called: a probe pays only for the hooks it has)."""
    fn = getattr(obj, hook, None)
    if fn is None:
        return None
    for cls in type(obj).__mro__:
        if hook in cls.__dict__:
            return fn if not getattr(cls.__dict__[hook], "_default_hook", False) else None
    return None


__all__ = ["CLOCK_HOOKS", "Marker", "Outcome", "StepClock"]
