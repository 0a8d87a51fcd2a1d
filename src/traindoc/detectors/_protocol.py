"""The detector interface, written down as a ``typing.Protocol``.

Detectors are plain classes and inherit from nothing: the Protocol only states the shape they
already share, so that mypy checks every class listed in ``DETECTORS`` against it and the
engine can call them without ``type: ignore``. A Protocol cannot say "this member may be
missing", so the optional members are listed in ``Detector``'s docstring and, for their
signatures, in the small Protocols below it; the engine looks them up with ``getattr`` and
treats a missing one as a no-op.
"""

from __future__ import annotations

from dataclasses import Field
from typing import Any, ClassVar, Iterable, Mapping, Protocol

from traindoc.detectors._common import Example
from traindoc.events import Event, Series
from traindoc.findings import Finding


class Detector(Protocol):
    """One failure, judged from the events of the signals it reads.

    Required:

    - ``id``: the catalog id, also the module name with ``_`` for ``-`` (``loss-spike``).
    - ``needs``: the signals it cannot work without; a source that lacks one makes the
      detector "not applicable". May be empty when ``uses`` is not. The engine reads it on the
      instance, which may replace the class's value from its config (metric-divergence).
    - ``examples``: cases that must fire (at a step) and cases that must stay quiet; they are
      the tests and the docs.
    - ``Config``: a nested frozen dataclass whose fields all have defaults, validated in
      ``__post_init__``; ``build`` passes ``Config(**overrides)`` to ``__init__``, which makes
      ``Config()`` when given None. ``config`` is that instance.
    - ``observe(event)``: findings made on seeing ``event`` (a generator is fine; None means
      none), for every event of a signal in ``needs`` or ``uses``.

    Optional (absent: the engine does nothing in its place):

    - ``uses: ClassVar[frozenset[str]]``: signals that enrich the evidence when present. A
      detector with no ``needs`` applies when any one of them was seen. Default: empty.
    - ``finish() -> Iterable[Finding] | None``: findings that need the whole run, once, at the
      end (``Finishing``). A later finding of the same id replaces the first one's evidence.
    - ``observe_series(columns) -> Iterable[Finding] | None``: a log's columns at once,
      ``{signal: Series}`` for its signals (``ObservingSeries``); without it the engine replays
      the columns to ``observe`` as ``Scalar`` events.
    - ``state_dict()`` / ``load_state_dict(state)``: for a detector that must survive a resume
      (``Stateful``); both or neither, and the state must round-trip.
    """

    id: ClassVar[str]
    needs: ClassVar[frozenset[str]]
    examples: ClassVar[tuple[Example, ...]]

    class Config(Protocol):
        """Any dataclass (what ``_typeshed.DataclassInstance`` checks); frozen by convention,
        which the registry test checks at run time."""

        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    # Not part of the structural check (mypy ignores __init__ there); it types ``cls(config)``.
    def __init__(self, config: Detector.Config | None = None) -> None: ...

    @property  # read-only here, so that each class's own Config type satisfies it
    def config(self) -> Detector.Config: ...

    def observe(self, event: Event) -> Iterable[Finding] | None: ...


class Finishing(Protocol):
    """The optional ``finish`` of a ``Detector``."""

    def finish(self) -> Iterable[Finding] | None: ...


class ObservingSeries(Protocol):
    """The optional ``observe_series`` of a ``Detector``."""

    def observe_series(self, columns: dict[str, Series]) -> Iterable[Finding] | None: ...


class Stateful(Protocol):
    """The optional ``state_dict``/``load_state_dict`` pair of a ``Detector``."""

    def state_dict(self) -> Mapping[str, object]: ...

    def load_state_dict(self, state: Mapping[str, object]) -> None: ...
