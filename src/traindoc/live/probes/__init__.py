"""The live probes, in one explicit list. Each probe class takes the session and a shared
Patcher, and has ``install()`` / ``uninstall()``; ``Probes`` installs them all in order and
removes them in reverse (the Patcher restores every patched function)."""

from __future__ import annotations

from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.amp import AmpProbes
from traindoc.live.probes.checkpoints import CheckpointProbes
from traindoc.live.probes.clipping import ClippingProbe
from traindoc.live.probes.core import CoreProbes
from traindoc.live.probes.data import DataProbes
from traindoc.live.probes.eval import EvalProbes
from traindoc.live.probes.eval_metrics import EvalMetricsProbe
from traindoc.live.probes.freeze import FreezeProbe
from traindoc.live.probes.inits import InitProbe
from traindoc.live.probes.loop import LoopProbes
from traindoc.live.probes.manual import ManualStepProbe
from traindoc.live.probes.losses import LossTermsProbe
from traindoc.live.probes.masking import MaskingProbe
from traindoc.live.probes.metrics import MetricsProbe
from traindoc.live.probes.order import OrderProbe
from traindoc.live.probes.routers import RouterProbe
from traindoc.live.probes.schedule import ScheduleProbe
from traindoc.live.session import Session

PROBES: tuple[type, ...] = (
    CoreProbes,
    ClippingProbe,  # before amp: amp's wrapper of clip_grads_with_norm_ goes on top of it
    AmpProbes,  # after core: wraps its clip_grad_norm_ wrapper
    CheckpointProbes,
    LoopProbes,  # after core: its step hook runs after the session has counted the step
    EvalProbes,
    DataProbes,
    MetricsProbe,
    RouterProbe,  # after metrics: shares its Publisher
    EvalMetricsProbe,  # after core: drops a loss that fed a backward before the round closes
    LossTermsProbe,  # after core: its backward wrapper runs first, before the user's backward
    MaskingProbe,  # reads the core probe's in_model_forward
    OrderProbe,
    ScheduleProbe,
    InitProbe,
    FreezeProbe,
    ManualStepProbe,  # last: its backward check runs before every other probe's
)


class Probes:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.patcher = Patcher(session)
        self._probes = [cls(session, self.patcher) for cls in PROBES]

    def install(self) -> None:
        for probe in self._probes:
            probe.install()
        self.patcher.sync_ops()

    def uninstall(self) -> None:
        for probe in reversed(self._probes):
            probe.uninstall()
        self.patcher.restore()
