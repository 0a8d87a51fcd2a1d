"""``traindoc.watch()``: the live doctor from code (a notebook, a custom loop).

    with traindoc.watch() as doc:          # or watch(model, optimizer) to name them
        for x, y in loader: ...
    doc.findings, doc.report()

The same session and probes as ``traindoc run``; the probes are removed on exit. SIGTERM or
SIGHUP inside the block (left at their default by the script) prints the report on stderr, then
ends the process by that signal (live/ending.py).
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any, Iterable, Mapping

from traindoc import config
from traindoc.engine import Report
from traindoc.findings import Finding


# The watches now open in this process, innermost last: a framework callback joins the open one
# instead of installing the probes a second time (``active()``).
_open: list["Watch"] = []


# Watches a forked child took down (``leave_inherited``), kept so that none is ever finalized.
_left: list["Watch"] = []


def active() -> "Watch | None":
    """The watch observing this process now (``traindoc run``, ``traindoc.watch()``, the
    autostart), or None."""
    return _open[-1] if _open else None


def _announce(f: Finding) -> None:
    from traindoc.report.text import live_line

    sys.stderr.write(live_line(f) + "\n")
    sys.stderr.flush()


class Watch:
    """Observe the training that runs inside the ``with`` block."""

    def __init__(
        self,
        model: Any = None,
        optimizer: Any = None,
        *,
        level: str = "standard",
        select: Iterable[str] | None = None,
        ignore: Iterable[str] = (),
        record: str | None = None,
        announce: bool = True,
        settings: config.Settings | None = None,
        script: str = "",
        argv: list[str] | None = None,
        guard: bool | Mapping[str, object] = False,
    ) -> None:
        from traindoc.live.levels import LEVELS

        if level not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
        self._model, self._optimizer = model, optimizer
        self._level, self._select, self._ignore, self._settings = level, select, tuple(ignore), settings
        # What a child process (mp.spawn) needs to watch itself the same way.
        self._options: dict[str, object] = dict(level=level, select=select, ignore=self._ignore, settings=settings)
        self._record = record
        # Only rank 0 talks: each rank observes itself, rank 0 reports (torchrun sets RANK).
        self._announce = announce and int(os.environ.get("RANK", "0")) == 0
        self._script = script or (sys.argv[0] if sys.argv else "")
        self._argv = list(argv if argv is not None else sys.argv[1:])
        self._report: Report | None = None
        self.session: Any = None
        # The rollback guard (opt-in; live/guard.py): True, or GuardConfig fields as a mapping.
        self._guard_options = guard
        self._guard: Any = None
        self.ranks: Any = None  # traindoc-ranks (issue 13): live/ranks.py, the cross-rank part
        self._signals: Any = None
        if guard:  # traindoc-ranks: one rank rolling back alone would make the replicas diverge
            from traindoc.live.guard import refuse_ranks

            refuse_ranks()

    def __enter__(self) -> "Watch":
        from traindoc.live.ending import Signals
        from traindoc.live.probes import Probes
        from traindoc.live.session import Session
        from traindoc.record import Recorder

        # SIGTERM/SIGHUP end no `with` block: report then (unless a face such as `traindoc run`
        # took them first, or the script handles them). Not in a multiprocessing child: the
        # parent reports for it (live/spawn.py).
        if _is_main_process():
            self._signals = Signals(self._signalled)
            self._signals.install()
        self._recorder = Recorder(self._record) if self._record else None
        self.session = Session(
            level=self._level, select=self._select, ignore=self._ignore, settings=self._settings,
            sink=self._recorder, announce=_announce if self._announce else None,
        )
        self.session.start(self._script, self._argv)
        if self._optimizer is not None:
            self.session.on_optimizer_created(self._optimizer)
        if self._model is not None:
            self.session.model.adopt_model(self._model)
        self._probes = Probes(self.session, everything=self._recorder is not None)
        self._probes.install()
        from traindoc.live.ranks import Ranks  # traindoc-ranks: cross-rank checks, mp.spawn children

        self.ranks = Ranks(self.session, dict(self._options, record=self._record, script=self._script,
                                              argv=self._argv, guard=bool(self._guard_options)), self._recorder)
        self.ranks.install(self._probes.patcher)
        if self._guard_options:
            from traindoc.live.guard import Guard, GuardConfig

            options: dict[str, Any] = dict(self._guard_options) if isinstance(self._guard_options, Mapping) else {}
            self._guard = Guard(self.session, GuardConfig(**options),
                                detector_config=(self._settings or config.Settings()).detectors,
                                announce=self._announce)
            self._guard.install()
        _open.append(self)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close(_status(ev))

    def close(self, status: str = "ok", exit_code: int = 0) -> Report:
        """Remove the probes and finish the report (idempotent). Fail-open like the probes: an
        error while finishing is one line on stderr and a report of what was found so far."""
        if self._signals is not None:
            with self._signals.reporting():  # a signal now waits for the report
                return self._close(status, exit_code)
        return self._close(status, exit_code)

    def _close(self, status: str, exit_code: int) -> Report:
        if self._report is None:
            if self in _open:
                _open.remove(self)
            for part, action in (("the guard", self._guard.uninstall if self._guard else None),
                                 ("the probes", self._probes.uninstall)):
                if action is not None:
                    _safely(f"removing {part}", action)
            if self.ranks is not None:  # traindoc-ranks: rank 0 hears the others first
                _safely("waiting for the other ranks", self.ranks.before_finish)
            try:
                self._report = self.session.finish(status, exit_code)
            except Exception as exc:  # never lose the report, never change the exit code
                sys.stderr.write(f"traindoc: internal error while finishing the report: "
                                 f"{type(exc).__name__}: {exc}\n")
                self._report = self.session.engine.finish()
                self._report.disabled.append(("finish", f"{type(exc).__name__}: {exc}"))
            if self.ranks is not None:  # traindoc-ranks: one report for the job
                self._report = self.ranks.after_finish(self._report, status)
            if self._recorder is not None:
                _safely("closing the event record", self._recorder.close)
        return self._report

    def _signalled(self, status: str, exit_code: int) -> None:
        """SIGTERM or SIGHUP ended the run inside the block: the report on stderr (rank 0)."""
        import argparse

        from traindoc.report import output

        report = self.close(status, exit_code)
        if self._announce:
            output.emit(report, argparse.Namespace(json=None, html=None, fail_on=None))

    @property
    def findings(self) -> list[Finding]:
        """Findings so far (all of them once the block has exited)."""
        if self._report is not None:
            return list(self._report.findings)
        return self.session.engine.findings if self.session else []

    def report(self) -> Report:
        if self._report is None:
            raise RuntimeError("the report is ready when the `with traindoc.watch()` block exits")
        return self._report


def leave_inherited() -> None:
    """In a forked child about to watch itself: the parent's open watches, copied by fork, come
    down without a report (probes and guard removed). Their files are the parent's: nothing is
    written, flushed or closed, and they stay referenced until the child ends (``os._exit``)."""
    while _open:
        doc = _open.pop()
        _left.append(doc)
        doc.session.silence()  # a probe coming down may still emit: nothing of it is written
        for part, action in (("the guard", doc._guard.uninstall if doc._guard else None),
                             ("the probes", doc._probes.uninstall)):
            if action is not None:
                _safely(f"removing the parent's {part}", action)


def _safely(what: str, action: Any) -> None:
    try:
        action()
    except Exception as exc:  # traindoc's own cleanup must never reach the user's script
        sys.stderr.write(f"traindoc: internal error {what}: {type(exc).__name__}: {exc}\n")


def _is_main_process() -> bool:
    """Not a multiprocessing child (``mp.spawn``'s ranks, a DataLoader worker)."""
    import multiprocessing

    return multiprocessing.parent_process() is None


def _status(ev: BaseException | None) -> str:
    if ev is None:
        return "ok"
    if isinstance(ev, SystemExit):
        return "exit"
    if isinstance(ev, KeyboardInterrupt):
        return "interrupted"
    if type(ev).__name__ == "GuardStop":
        return "stopped"
    return "exception"


def watch(model: Any = None, optimizer: Any = None, **options: Any) -> Watch:
    """Observe training inside a ``with`` block; see ``Watch``."""
    return Watch(model, optimizer, **options)
