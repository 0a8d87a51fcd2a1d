"""What every live probe is: a small class with no-op hooks (as Lightning's ``Callback``).

A probe measures what torch's own hooks show it and hands the values to the session
(``defer``, ``emit``); it never reads or writes another probe's state. It says which signals
it produces (``signals``, names of ``traindoc.events.SIGNALS``, or ``"metrics"`` for the
training script's own metrics), and ``Probes`` installs it only when a selected detector reads
one of them. A ``required`` probe feeds the step clock itself (optimizer steps, backward calls,
steps a GradScaler skipped, hand-written updates) and is always installed.

The hooks below are called by the step clock and the session, and only when a probe
overrides them: a probe pays for the hooks it has, nothing for the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, TypeVar

if TYPE_CHECKING:
    from traindoc.live.probes._patch import Patcher
    from traindoc.live.session import Session

F = TypeVar("F", bound=Callable[..., Any])


def _default(fn: F) -> F:
    """Marks a no-op default hook: the clock never calls one that is not overridden."""
    setattr(fn, "_default_hook", True)
    return fn


class FirstCalls:
    """Which calls of a module a sampled step measures: its first ``LIMIT`` in the step. A
    module called many times a step (a recurrent cell stepped in a Python loop, a block shared
    across depth, many micro-batches) would make a sampled step pay its measurements once per
    call, several times the call's own work each; its first calls show what the detectors read
    (NaN in outputs, dead units, output dtype under autocast), the others cost a dict lookup.
    Keyed by ``id``: a module's own ``__eq__``/``__hash__`` are never called. ``clear`` at the
    end of each sampled round."""

    LIMIT = 16

    def __init__(self) -> None:
        self._n: dict[int, int] = {}

    def take(self, module: Any) -> bool:
        """Count a call of ``module``: is it among the measured ones?"""
        n = self._n.get(id(module), 0) + 1
        self._n[id(module)] = n
        return n <= self.LIMIT

    def taken(self, module: Any) -> bool:
        """Was the call just counted (by ``take``, at the pre-hook) a measured one?"""
        return self._n.get(id(module), 0) <= self.LIMIT

    def clear(self) -> None:
        self._n.clear()


class Probe:
    name: ClassVar[str] = ""
    signals: ClassVar[tuple[str, ...]] = ()
    required: ClassVar[bool] = False

    def __init__(self, session: Session, patcher: Patcher) -> None:
        self.s = session
        self.clock = session.clock
        self._patcher = patcher
        self._patch = patcher.patch
        self._guard = patcher.guard  # (part, fn, *args): an error disables the part, never the script
        self._ops = patcher.ops

    def install(self) -> None:
        """Put up hooks and patches (``Patcher`` takes the patches down again)."""

    def uninstall(self) -> None:
        """Take down what ``install`` put up that the ``Patcher`` does not restore."""

    @_default
    def on_sampling(self, on: bool) -> None:
        """Sampled steps begin (True) or end (False), at a level that measures activations."""

    @_default
    def on_round_end(self, step: int) -> None:
        """``step``'s round closed (every step; keep it cheap)."""

    @_default
    def on_sampled_round_end(self, step: int) -> None:
        """A sampled step's round closed: what the step measured is complete."""

    @_default
    def on_first_step(self, opt: Any) -> None:
        """The run's first optimizer step is about to run: the model is built."""

    @_default
    def on_module_output(self, module: Any, output: Any) -> None:
        """A module returned ``output`` in a sampled training forward."""


__all__ = ["FirstCalls", "Probe"]
