"""The live probes, in one explicit list. Each probe class takes the session and a shared
Patcher, and has ``install()`` / ``uninstall()``; ``Probes`` installs them all in order and
removes them in reverse (the Patcher restores every patched function)."""

from __future__ import annotations

from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.core import CoreProbes
from traindoc.live.session import Session

PROBES: tuple[type, ...] = (
    CoreProbes,
)


class Probes:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._patcher = Patcher(session)
        self._probes = [cls(session, self._patcher) for cls in PROBES]

    def install(self) -> None:
        for probe in self._probes:
            probe.install()

    def uninstall(self) -> None:
        for probe in reversed(self._probes):
            probe.uninstall()
        self._patcher.restore()
