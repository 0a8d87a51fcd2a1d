"""The engine: feeds events to detectors, decides applicability, isolates crashes.

It knows nothing of torch, files or rendering. A source (live hooks, a log reader, a checkpoint
reader, a recorded stream) calls ``feed`` for each event and ``finish`` once; the result is a
``Report`` of plain data that any renderer can show.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from traindoc.curves import Curve, Curves, ParamValue
from traindoc.events import SIGNALS, Event, RunEnd, RunStart, Scalar, Series
from traindoc.findings import Finding, severity_rank

# Events queued for the column detectors before a delivery without waiting for a flush point:
# bounds how late their findings come from a source that never calls flush() (about 80 steps
# of a live run), and the queues. A delivery costs a column detector 20-50 us of numpy set-up
# however short its columns are: 0.2 us per point at this size.
CHUNK = 256

if TYPE_CHECKING:  # importing the detectors package would import every detector
    from traindoc.detectors import Detector

# A detector's observe, finish or observe_series, bound to it.
Hook = Callable[..., Iterable[Finding] | None]


@dataclass
class Report:
    """Everything a renderer needs. ``run`` holds the JSON report's run block."""

    run: dict[str, object]
    findings: list[Finding]
    ran: list[str]
    not_applicable: list[tuple[str, str]]
    disabled: list[tuple[str, str]] = field(default_factory=list)
    # The run's signals downsampled for plots, and each parameter's last measurement (curves.py).
    series: dict[str, Curve] = field(default_factory=dict)
    params: dict[str, dict[str, ParamValue]] = field(default_factory=dict)

    def worst(self) -> int:
        """severity_rank of the worst finding (3 when there is none)."""
        return min((severity_rank(f.severity) for f in self.findings), default=3)


class Engine:
    """Routes events by signal to the detectors that need them.

    Each detector gets its events in the order they came, through one queue: a run of numbers
    (``Scalar`` points and a log's ``Series`` columns) is handed to ``observe_series`` as
    ``{signal: Series}`` (at most one column per signal a call), every other event to
    ``observe``. A per-point detector's queue is handed over at each event that is not a log's
    column, a Scalar straight to ``observe`` (what the ``Detector`` default of
    ``observe_series`` would do with its one-point column). A *column detector* (one that
    judges columns: ``Detector.columnar``) is handed its queue at flush points only: the
    source's ``flush()`` (the live guard's step), every ``CHUNK`` events, ``finish()``; its
    findings can come later than the point that made them, with the same step numbers.
    (Delivering at every event would cost each column detector its numpy set-up on every step
    of a live run.) Every member of ``detectors.Detector`` has a default: the engine calls
    them all.

    A detector that raises is disabled and reported once (``Report.disabled``); the others go
    on. The first finding of an id is announced through ``on_finding``; a later finding of the
    same id (a detector refining its evidence at the end) replaces the stored one but keeps the
    first step and is not announced again.
    """

    def __init__(
        self,
        detectors: Sequence[Detector],
        *,
        on_finding: Callable[[Finding], None] | None = None,
        ignore: Iterable[str] = (),
    ) -> None:
        self._detectors = list(detectors)
        self._on_finding = on_finding
        self._ignore = set(ignore)
        self._routes: dict[str, list[Detector]] = {}
        for det in self._detectors:
            # ``needs``: required signals; ``uses``: optional ones that enrich the evidence.
            for signal in sorted(set(det.needs) | set(det.uses)):
                self._routes.setdefault(signal, []).append(det)
        self._fixed = set(self._routes)  # the signals named up front; others are routed by reads()
        self._unrouted: set[Detector] = set()  # detectors whose signals the source said it lacks
        self._seen: set[str] = set()
        self._findings: dict[str, Finding] = {}
        self._disabled: dict[str, str] = {}
        self._run: dict[str, object] = {}
        self._steps = 0
        self._finished: Report | None = None
        self._queues: dict[Detector, list[Event]] = {det: [] for det in self._detectors}
        self._queued = 0  # events waiting in the column detectors' queues
        self._curves = Curves()

    def signals(self) -> set[str]:
        """Every signal some detector names (needs or uses); ``wants`` also knows the signals
        a detector reads by name."""
        return set(self._fixed)

    def wants(self, signal: str) -> bool:
        """Does any detector observe ``signal``? (a source may skip making routine events
        nobody reads)"""
        return bool(self._route(signal))

    def _route(self, signal: str) -> list[Detector]:
        """The detectors that observe ``signal``: those that name it, or, the first time a signal
        no detector names comes, those that read it (``Detector.reads``)."""
        routed = self._routes.get(signal)
        if routed is None:
            routed = self._routes[signal] = [
                det for det in self._detectors if det not in self._unrouted and self._reads(det, signal)]
        return routed

    def _reads(self, det: Detector, signal: str) -> bool:
        try:
            return det.reads(signal)
        except Exception as exc:  # a detector bug must never reach the user's training
            self._disable(det, exc)
            return False

    @property
    def findings(self) -> list[Finding]:
        return list(self._findings.values())

    def state_dict(self) -> dict[str, object]:
        """What a run resumed in another process needs to go on where this one stopped: the
        findings, the signals seen, and the state of each detector that keeps one across a
        resume (``Stateful``). Plain data only (dicts, lists, tuples, str, numbers), so a
        checkpoint holding it loads with ``torch.load(weights_only=True)``. Scalars waiting for
        a column detector are delivered first."""
        self.flush()
        detectors: dict[str, object] = {}
        for det in self._detectors:
            if det.id not in self._disabled:
                state = det.state_dict()
                if state and _plain(state):  # else not carried (a checkpoint must never fail because
                    detectors[det.id] = state  # of us); tests/integrations/test_resume_state.py checks each
        return {
            "version": _STATE_VERSION,
            "detectors": detectors,
            "findings": [f.to_dict() for f in self._findings.values()],
            "seen": sorted(self._seen),
            "steps": self._steps,
            "disabled": dict(self._disabled),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go on from ``state_dict()`` of an earlier engine (the run before a resume). Findings
        already made are kept and not announced again; a detector absent from this run is
        skipped, and one whose ``load_state_dict`` fails on the state (another traindoc
        version) starts afresh."""
        if state.get("version") != _STATE_VERSION:
            return
        by_id = {det.id: det for det in self._detectors}
        for id_, det_state in state.get("detectors", {}).items():
            det = by_id.get(id_)
            if det is None or id_ in self._disabled:
                continue
            fresh = dict(vars(det))
            try:
                det.load_state_dict(det_state)
            except Exception:  # a state this version cannot read: start afresh
                vars(det).clear()
                vars(det).update(fresh)
        for d in state.get("findings", ()):
            f = Finding.from_dict(d)
            if f.id not in self._ignore:
                self._findings.setdefault(f.id, f)
        self._seen.update(state.get("seen", ()))
        self._steps = max(self._steps, int(state.get("steps", 0)))
        for id_, why in state.get("disabled", {}).items():
            self._disabled.setdefault(id_, why)

    def silence(self) -> None:
        """Announce no finding from now on."""
        self._on_finding = None

    def feed(self, event: Event) -> None:
        self._curves.feed(event)
        signal = event.signal
        if isinstance(event, Series):
            if len(event):
                self._steps = max(self._steps, int(event.steps[-1]) + 1)  # steps are non-decreasing
                self._seen.add(signal)
        else:
            if isinstance(event, RunStart):
                self._run.update(
                    source=event.source, script=event.script, argv=list(event.argv),
                    python=event.python, torch=event.torch, started=event.started,
                    ranks=event.world_size, level=event.level,
                )
                if event.signals:
                    self._declared(set(event.signals))
            elif isinstance(event, RunEnd):
                self._run.update(steps=event.steps, duration_s=event.duration_s, status=event.status,
                                 trained=event.trained)
                if event.exit_code:
                    self._run.update(exit_code=event.exit_code)
                if event.optimizer_steps is not None:
                    self._run.update(optimizer_steps=event.optimizer_steps)
            step = getattr(event, "step", None)
            if isinstance(step, int) and step + 1 > self._steps:
                self._steps = step + 1
            self._seen.add(signal)
        for det in self._route(signal):
            queue = self._queues[det]
            if det.columnar or isinstance(event, Series):  # a log's columns wait for the next event
                queue.append(event)
                self._queued += det.columnar
            elif queue:
                queue.append(event)
                self._deliver(det)
            else:
                self._call(det, det.observe, event)  # a point as it comes (the usual case)
        if self._queued >= CHUNK:
            self.flush()

    def flush(self) -> None:
        """Hand every detector what waits in its queue now (a source calls this where a delay
        would matter, e.g. before the live guard acts on a step's findings)."""
        for det, queue in self._queues.items():
            if queue:
                self._deliver(det)
        self._queued = 0

    def _declared(self, signals: set[str]) -> None:
        """The source said up front which signals it carries: stop routing events to detectors
        that need others (a million-row log pays nothing for them)."""
        for det in self._detectors:
            if self._missing(det, signals):
                self._unrouted.add(det)
                for routed in self._routes.values():
                    if det in routed:
                        routed.remove(det)

    def _missing(self, det: Detector, seen: set[str]) -> list[str]:
        """The signals ``det`` lacks: none once it saw a signal it reads by name; else all of
        its ``needs``; with no needs, any one of its ``uses``."""
        needs, uses = set(det.needs), set(det.uses)
        if any(self._reads(det, s) for s in seen - needs):
            return []
        if needs:
            return sorted(needs - seen)
        return [] if uses & seen else sorted(uses)

    def _deliver(self, det: Detector) -> None:
        """``det``'s queue, in order: each run of numbers as columns in the order their signals
        first came (a column does not say in which order two signals of one step came; live
        sends a step's gradient norm, then its loss), a signal's Scalars gathered into one
        column, a second log column of a signal in the next call; every other event to
        ``observe``."""
        queue = self._queues[det]
        self._queues[det] = []
        call: dict[str, Series] = {}
        for event in queue:
            if not (isinstance(event, Series) or isinstance(event, Scalar) and det.columnar):
                if call:
                    self._call(det, det.observe_series, call)
                    call = {}
                self._call(det, det.observe, event)
            elif isinstance(event, Scalar) and isinstance(column := call.get(event.name), _Gathered):
                column.steps.append(event.step)
                column.values.append(event.value)
            else:
                if event.signal in call:
                    self._call(det, det.observe_series, call)
                    call = {}
                call[event.signal] = (_Gathered(event.name, [event.step], [event.value])
                                      if isinstance(event, Scalar) else event)
        if call:
            self._call(det, det.observe_series, call)

    def finish(self) -> Report:
        if self._finished is not None:
            return self._finished
        self.flush()
        for det in self._detectors:
            self._call(det, det.finish)
        ran: list[str] = []
        not_applicable: list[tuple[str, str]] = []
        for det in self._detectors:
            id_ = det.id
            if id_ in self._disabled or id_ in self._ignore:
                continue
            missing = self._missing(det, self._seen)
            if missing and id_ not in self._findings:
                what = "; ".join(f"{s} ({SIGNALS.get(s, s)})" for s in missing)
                not_applicable.append((id_, f"this run showed no {what}"))
            else:
                ran.append(id_)
        self._run.setdefault("steps", self._steps)
        findings = sorted(
            self._findings.values(),
            key=lambda f: (severity_rank(f.severity), f.step if f.step is not None else 1 << 62),
        )
        self._finished = Report(
            run=dict(self._run), findings=findings, ran=ran, not_applicable=not_applicable,
            disabled=sorted(self._disabled.items()),
            series=self._curves.series(), params=self._curves.params(),
        )
        return self._finished

    def _call(self, det: Detector, hook: Hook, *args: object) -> None:
        """``hook(*args)``: one of ``det``'s methods, its findings recorded, its crash contained."""
        id_ = det.id
        if id_ in self._disabled:
            return
        try:
            found = hook(*args)
            if found is not None:
                for f in found:
                    self.add(f)
        except Exception as exc:  # a detector bug must never reach the user's training
            self._disable(det, exc)

    def _disable(self, det: Detector, exc: Exception) -> None:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        self._disabled[det.id] = f"{type(exc).__name__}: {exc} ({last.filename}:{last.lineno})"

    def add(self, f: Finding) -> None:
        """Record a finding: a detector's, or one made outside the detectors (the guard
        reporting what it did)."""
        if f.id in self._ignore:
            return
        old = self._findings.get(f.id)
        if old is None:
            self._findings[f.id] = f
            if self._on_finding is not None:
                self._on_finding(f)
            return
        # A refinement: keep the first step, take the newer evidence.
        self._findings[f.id] = replace(f, step=old.step if old.step is not None else f.step)


class _Gathered(Series):
    """A column the engine builds from Scalar points (lists it may still append to)."""

    steps: list[int]
    values: list[float]


# ---- state across a resume (Engine.state_dict) -------------------------------------------------
_STATE_VERSION = 1


def _plain(x: object) -> bool:
    """Is ``x`` data that ``torch.load(weights_only=True)`` reads back (no class of ours)?"""
    if x is None or type(x) in (bool, int, float, str):  # not numpy's float64: a class of numpy
        return True
    if isinstance(x, (list, tuple)):
        return all(map(_plain, x))
    if isinstance(x, dict):
        return all(_plain(k) and _plain(v) for k, v in x.items())
    return False
