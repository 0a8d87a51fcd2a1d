"""The engine: feeds events to detectors, decides applicability, isolates crashes.

It knows nothing of torch, files or rendering. A source (live hooks, a log reader, a checkpoint
reader, a recorded stream) calls ``feed`` for each event and ``finish`` once; the result is a
``Report`` of plain data that any renderer can show.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

from traindoc.events import SIGNALS, Event, RunEnd, RunStart
from traindoc.findings import Finding, severity_rank


@dataclass
class Report:
    """Everything a renderer needs. ``run`` holds the JSON report's run block."""

    run: dict[str, object]
    findings: list[Finding]
    ran: list[str]
    not_applicable: list[tuple[str, str]]
    disabled: list[tuple[str, str]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # seconds spent per detector

    def worst(self) -> int:
        """severity_rank of the worst finding (3 when there is none)."""
        return min((severity_rank(f.severity) for f in self.findings), default=3)


class Engine:
    """Routes events by signal to the detectors that need them.

    A detector that raises is disabled and reported once (``Report.disabled``); the others go
    on. The first finding of an id is announced through ``on_finding``; a later finding of the
    same id (a detector refining its evidence at the end) replaces the stored one but keeps the
    first step and is not announced again.
    """

    def __init__(
        self,
        detectors: Sequence[object],
        *,
        on_finding: Callable[[Finding], None] | None = None,
        ignore: Iterable[str] = (),
        profile: bool = False,
    ) -> None:
        self._detectors = list(detectors)
        self._profile = profile  # per-detector time accounting (Report.timings)
        self._on_finding = on_finding
        self._ignore = set(ignore)
        self._routes: dict[str, list[object]] = {}
        for det in self._detectors:
            # ``needs``: required signals; ``uses``: optional ones that enrich the evidence.
            wanted = set(det.needs) | set(getattr(det, "uses", ()))  # type: ignore[attr-defined]
            for signal in sorted(wanted):
                self._routes.setdefault(signal, []).append(det)
        self._seen: set[str] = set()
        self._findings: dict[str, Finding] = {}
        self._disabled: dict[str, str] = {}
        self._time: dict[str, float] = {}
        self._run: dict[str, object] = {}
        self._steps = 0
        self._finished: Report | None = None

    @property
    def findings(self) -> list[Finding]:
        return list(self._findings.values())

    def add(self, finding: Finding) -> None:
        """Record a finding made outside the detectors (the guard reporting what it did)."""
        self._record(finding)

    def feed(self, event: Event) -> None:
        signal = event.signal
        if isinstance(event, RunStart):
            self._run.update(
                source=event.source, script=event.script, argv=list(event.argv),
                python=event.python, torch=event.torch, started=event.started,
                ranks=event.world_size, level=event.level,
            )
        elif isinstance(event, RunEnd):
            self._run.update(steps=event.steps, duration_s=event.duration_s, status=event.status)
        step = getattr(event, "step", None)
        if isinstance(step, int) and step + 1 > self._steps:
            self._steps = step + 1
        self._seen.add(signal)
        if isinstance(event, RunStart) and event.signals:
            self._declared(set(event.signals))
        for det in self._routes.get(signal, ()):
            self._call(det, "observe", event)

    def _declared(self, signals: set[str]) -> None:
        """The source said up front which signals it carries: stop routing events to detectors
        that need others (a million-row log pays nothing for them)."""
        for det in self._detectors:
            if _missing(det, signals):
                for routed in self._routes.values():
                    if det in routed:
                        routed.remove(det)

    def finish(self) -> Report:
        if self._finished is not None:
            return self._finished
        for det in self._detectors:
            self._call(det, "finish")
        ran, not_applicable = [], []
        for det in self._detectors:
            id_ = det.id  # type: ignore[attr-defined]
            if id_ in self._disabled or id_ in self._ignore:
                continue
            missing = _missing(det, self._seen)
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
            disabled=sorted(self._disabled.items()), timings=dict(self._time),
        )
        return self._finished

    def _call(self, det: object, method: str, *args: object) -> None:
        id_ = det.id  # type: ignore[attr-defined]
        if id_ in self._disabled:
            return
        t0 = time.perf_counter() if self._profile else 0.0
        try:
            found = getattr(det, method)(*args)
            if found is not None:
                for f in found:
                    self._record(f)
        except Exception as exc:  # a detector bug must never reach the user's training
            last = traceback.extract_tb(exc.__traceback__)[-1]
            self._disabled[id_] = f"{type(exc).__name__}: {exc} ({last.filename}:{last.lineno})"
        if self._profile:
            self._time[id_] = self._time.get(id_, 0.0) + time.perf_counter() - t0

    def _record(self, f: Finding) -> None:
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


def _missing(det: object, seen: set[str]) -> list[str]:
    """The signals ``det`` lacks: all of its ``needs``; with no needs, any one of its ``uses``."""
    needs = set(det.needs)  # type: ignore[attr-defined]
    if needs:
        return sorted(needs - seen)
    uses = set(getattr(det, "uses", ()))
    return [] if uses & seen else sorted(uses)
