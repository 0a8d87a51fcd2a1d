"""Steps written by hand (``live/manual.py``): its checks around every backward.

Registered last, so that its check runs before every other probe's work for a backward: a
hand-written update found there ends the round (the post-step hooks run) before the next
step's measurements begin.
"""

from __future__ import annotations

from typing import Any

from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session


class ManualStepProbe(Probe):
    name = "manual"
    signals = ("params", "optimizer", "accumulation", "lifecycle")
    required = True

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)

    def install(self) -> None:
        manual = self.s.manual
        self._patcher.on_backward(self.name, before=self._before, after=manual.after_backward)

    def uninstall(self) -> None:
        pass

    def _before(self, loss: Any) -> None:
        s = self.s
        if s.manual.off:  # a torch.optim optimizer steps: no hand-written update to look for
            self._patcher.drop_backward(self.name)
        elif not s.clock.round_done and s.clock.micro:
            s.manual.step_ended()
