"""What the framework callbacks share: one live session, the report options of ``traindoc run``,
the trackers a first finding is sent to, and the report when training ends.

A callback is a thin producer: it starts the same ``Watch`` (the same probes, engine and
detectors) that ``traindoc run`` starts, or joins the one already watching this process
(``traindoc run train.py``, ``traindoc.watch()``, ``TRAINDOC=1``), so the probes are never
installed twice. A session it joined belongs to whoever opened it: that owner writes the report.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from traindoc import config
from traindoc.engine import Report
from traindoc.findings import Finding
from traindoc.integrations import trackers
from traindoc.integrations._options import OptionArgs, Options, TrainingFindings, at_or_above

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.12 (PEP 692); we support 3.10


class Doctor:
    """One callback's session: ``start`` when training starts, ``poll`` after each step,
    ``finish`` when it ends."""

    def __init__(self, **options: Unpack[OptionArgs]) -> None:
        self.options = Options(**options)  # checked now: a wrong option fails before training
        self.watch: Any = None
        self.owned = False
        self.report: Report | None = None
        self.trackers: list[trackers.Tracker] = []
        self._sent: set[str] = set()
        self._engine: Any = None  # the session's engine: its state outlives the session
        self._restored: Mapping[str, Any] | None = None  # an engine state to load at start

    @property
    def running(self) -> bool:
        return self.watch is not None and self.report is None

    def start(self, model: Any = None, optimizer: Any = None,
              framework_trackers: Sequence[object] = (), tensorboard_dir: str | None = None) -> None:
        """Observe from now on: join the watch already open in this process, or open one."""
        from traindoc.live.watch import Watch, active

        if self.running:
            return
        self.report = None
        self._sent = set()
        self.trackers = trackers.resolve(self.options.export, framework_trackers, tensorboard_dir)
        joined = active()
        if joined is not None:
            self.watch, self.owned = joined, False
            if optimizer is not None:
                joined.session.on_optimizer_created(optimizer)
            if model is not None:
                joined.session.model.adopt_model(model)
        else:
            settings = config.load()
            opts = self.options
            select = tuple(opts.select) if opts.select is not None else settings.select
            ignore = tuple(opts.ignore) + tuple(settings.ignore)
            self.watch = Watch(model, optimizer, level=opts.level, select=select, ignore=ignore,
                               settings=settings)
            self.watch.__enter__()
            self.owned = True
            # Training that stops without the framework's end hook (an exception out of
            # trainer.train()) still gets its probes removed and its report at exit.
            atexit.register(self._at_exit)
        self._engine = self.watch.session.engine
        if self._restored is not None:
            self._engine.load_state_dict(self._restored)
            self._restored = None

    def publish(self, channel: str, values: Mapping[str, object]) -> None:
        """Values the framework computed and logged itself (HF's logs, Lightning's logged
        metrics), read as the live face reads a script's own logging: the same Scalars."""
        from traindoc import metrics

        if self.running and values:
            for sink in list(metrics.log_sinks):
                sink(channel, values)

    @property
    def findings(self) -> list[Finding]:
        if self.report is not None:
            return list(self.report.findings)
        return list(self.watch.findings) if self.watch is not None else []

    def poll(self) -> None:
        """Send each finding that fired since the last poll to the trackers (once per id)."""
        if self.trackers and self.running:
            self._send(self.watch.findings)

    def _send(self, found: list[Finding]) -> None:
        for f in found:
            if f.id not in self._sent:
                self._sent.add(f.id)
                trackers.send_finding(self.trackers, f, found)

    def state_dict(self) -> dict[str, object]:
        """The engine's state (findings and detector state: ``Engine.state_dict``), plain data
        that a checkpoint loaded with ``weights_only=True`` holds. The values still waiting
        for the session's batched read are read first (one sync, at a checkpoint)."""
        if self._engine is None:
            return {}
        if self.running:
            self.watch.session.flush()
        state: dict[str, object] = self._engine.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The run before a resume: its findings stay in this run's report and its detectors
        go on from where they were (now, or when this session starts)."""
        if not state:
            return
        if self.running:
            self._engine.load_state_dict(state)
        else:
            self._restored = state

    def finish(self, status: str = "ok") -> Report | None:
        """Training ended: the report (an owned session) and the trackers' copy of it. Raises
        TrainingFindings when ``fail_on`` is set and a finding is at or above it."""
        if not self.running:
            return self.report
        self.poll()
        if not self.owned:  # the session's owner reports; this callback only stops here
            self.watch = None
            return None
        atexit.unregister(self._at_exit)
        self.report = report = self.watch.close(status)
        if int(os.environ.get("RANK", "0")) != 0:  # each rank observes itself; rank 0 reports
            return report
        from traindoc.report import output

        args = argparse.Namespace(json=self.options.json, html=self.options.html, fail_on=None)
        output.emit(report, args)
        if self.trackers:
            from traindoc.report import json as json_report

            self._send(report.findings)  # those judged at the end of the run
            trackers.send_report(self.trackers, report, json_report.dumps(report))
        fail_on = self.options.fail_on
        if fail_on is not None and status == "ok":
            failing = at_or_above(report.findings, fail_on)
            if failing:
                raise TrainingFindings(failing, fail_on)
        return report

    def _at_exit(self) -> None:
        if self.running:
            sys.stderr.write("traindoc: training stopped before its end hook; the report follows\n")
            self.finish("exception")
