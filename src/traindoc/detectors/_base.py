"""The detector base class: every member a detector may have, with a documented default.

As Lightning's ``Callback``: a detector subclasses ``Detector`` and overrides only what it
uses; the engine calls every member, never looks one up. One level deep: nothing subclasses
a detector.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar, Iterable, Mapping

from traindoc.detectors import _carry
from traindoc.detectors._common import Example
from traindoc.events import Event, Series, scalars
from traindoc.findings import Finding


class Detector:
    """One failure, judged from the events of the signals it reads.

    Class attributes:

    - ``id``: the catalog id, also the module name with ``_`` for ``-`` (``loss-spike``).
    - ``needs``: the signals it cannot work without; a source that lacks one makes the detector
      "not applicable". May be empty when ``uses`` is not.
    - ``uses``: signals that enrich the evidence when present. A detector with no ``needs``
      applies when any one of them was seen. Default: none.
    - ``reads(signal)``: signals named by the run itself that it also judges (every error
      metric, for metric-divergence), decided by name when each first comes; one such signal
      seen makes it applicable, as its ``needs`` would. Default: none.
    - ``examples``: cases that must fire (at a step) and cases that must stay quiet; they are the
      tests and the docs.
    - ``Config``: a nested frozen dataclass whose fields all have defaults, validated in
      ``__post_init__``; ``build`` passes ``Config(**overrides)`` to ``__init__``, which sets
      ``self.config`` (``Config()`` when given None). Default: no options.
    - ``carry``: the attributes that stay true in a new process (values measured in the run,
      counts towards a threshold, bounded windows of them), saved and restored across a resume
      as plain data (``_carry``). Nothing else carries over: object ids, iterator counts and
      timestamps belong to the old process. Default: none (a resumed run starts it afresh).
    """

    id: ClassVar[str]
    needs: ClassVar[frozenset[str]] = frozenset()
    uses: ClassVar[frozenset[str]] = frozenset()
    examples: ClassVar[tuple[Example, ...]] = ()
    carry: ClassVar[tuple[str, ...]] = ()
    # Set for each subclass: does it judge whole columns (its own ``observe_series``)? Then the
    # engine hands it a live run's Scalars in small columns, not one by one.
    columnar: ClassVar[bool] = False

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.columnar = "observe_series" in vars(cls)

    @dataclass(frozen=True)
    class Config:
        """No options."""

    def __init__(self, config: object = None) -> None:
        """Each detector sets ``self.config`` to its own ``Config`` (typed there, not here, so
        that mypy knows each detector's fields)."""

    def reads(self, signal: str) -> bool:
        """Does it judge ``signal`` besides its ``needs`` and ``uses``? (a ``metric.*`` signal,
        whose name the script chose). Default: no."""
        return False

    def observe(self, event: Event) -> Iterable[Finding] | None:
        """Findings made on seeing ``event`` (a generator is fine; None means none), for every
        event of a signal in ``needs`` or ``uses`` or that it ``reads``. Default: none."""
        return None

    def observe_series(self, columns: dict[str, Series]) -> Iterable[Finding] | None:
        """The next points of its signals, ``{signal: Series}`` (a log's columns, or a live
        run's Scalars gathered into small columns). A detector that judges columns overrides
        this and never gets a ``Scalar`` in ``observe``. Default: the points replayed to
        ``observe`` as ``Scalar`` events, in the order a per-point source sends them
        (``events.scalars``)."""
        return (f for event in scalars(list(columns.values())) for f in self.observe(event) or ())

    def finish(self) -> Iterable[Finding] | None:
        """Findings that need the whole run, once, at the end. A later finding of the same id
        replaces the first one's evidence. Default: none."""
        return None

    def state_dict(self) -> dict[str, object]:
        """The ``carry`` attributes, as plain data (empty: nothing to carry)."""
        return _carry.save(self, self.carry)

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Set the ``carry`` attributes from ``state_dict``'s data. A carried object may be of a
        small class of the detector's own module (a track, a streak), never another: a state
        never picks the code to run. Raises on a name not carried (another traindoc version)."""
        module = type(self).__module__
        own = [v for v in vars(sys.modules[module]).values() if isinstance(v, type) and v.__module__ == module]
        _carry.load(self, state, self.carry, own)

