"""The live probes, in one explicit list, and the one place that installs them.

Each probe is a ``Probe`` (``base.py``): it declares the signals it measures, and ``Probes``
installs only those a selected detector reads (all of them when the run is recorded: a
recording is read again later by any detector), plus the ``required`` ones that feed the step
clock. Probes are installed in this order and removed in reverse; the Patcher restores every
patched function. The order matters only where two probes wrap the same function (the
comments say which)."""

from __future__ import annotations

import warnings
from typing import Iterable

from traindoc.events import SIGNALS
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.accumulation import AccumulationProbe
from traindoc.live.probes.amp import AmpProbes
from traindoc.live.probes.base import Probe
from traindoc.live.probes.checkpoints import CheckpointProbes
from traindoc.live.probes.clipping import ClippingProbe
from traindoc.live.probes.core import CoreProbes
from traindoc.live.probes.data import DataProbes
from traindoc.live.probes.embeddings import EmbeddingsProbe
from traindoc.live.probes.eval import EvalProbes
from traindoc.live.probes.eval_metrics import EvalMetricsProbe
from traindoc.live.probes.freeze import FreezeProbe
from traindoc.live.probes.inits import InitProbe
from traindoc.live.probes.loop import LoopProbes
from traindoc.live.probes.manual import ManualStepProbe
from traindoc.live.probes.loss_graph import LossGraphProbe
from traindoc.live.probes.losses import LossTermsProbe
from traindoc.live.probes.masking import MaskingProbe
from traindoc.live.probes.metrics import MetricsProbe
from traindoc.live.probes.order import OrderProbe
from traindoc.live.probes.routers import RouterProbe
from traindoc.live.probes.schedule import ScheduleProbe
from traindoc.live.session import Session
from traindoc.live.warning_site import attributed

PROBES: tuple[type[Probe], ...] = (
    CoreProbes,
    ClippingProbe,  # before amp: amp's wrapper of clip_grads_with_norm_ goes on top of it
    AmpProbes,  # after core: wraps its clip_grad_norm_ wrapper
    CheckpointProbes,
    LoopProbes,  # after core: its step hook runs after the session has counted the step
    AccumulationProbe,  # after core, as the loop probe
    EvalProbes,
    DataProbes,
    MetricsProbe,
    RouterProbe,
    EvalMetricsProbe,  # after core: drops a loss that fed a backward before the round closes
    LossTermsProbe,  # after core: its backward callback runs first, before the session's
    MaskingProbe,
    EmbeddingsProbe,
    LossGraphProbe,
    OrderProbe,
    ScheduleProbe,
    InitProbe,
    FreezeProbe,
    ManualStepProbe,  # last: its backward check runs before every other probe's
)

# Signals of the run itself, not measured by a probe.
_BUILT_IN = {"run", "end"}


def probe_signals(wanted: Iterable[str]) -> set[str]:
    """The probe signals that detectors reading ``wanted`` need: a name that is no event
    signal is one of the script's own metrics (``val_acc``), which the metric probes measure."""
    return {s if s in SIGNALS else "metrics" for s in wanted if s not in _BUILT_IN}


def selected(wanted: Iterable[str] | None) -> list[type[Probe]]:
    """The probes to install for detectors reading ``wanted`` (None: every probe)."""
    if wanted is None:
        return list(PROBES)
    wanted = set(wanted)
    signals = wanted | probe_signals(wanted)  # a probe may measure a named metric itself (routers)
    return [cls for cls in PROBES if cls.required or signals & set(cls.signals)]


class Probes:
    def __init__(self, session: Session, *, everything: bool = False) -> None:
        self.session = session
        self.patcher = Patcher(session)
        chosen = selected(None if everything else session.engine.signals())
        self._probes = [cls(session, self.patcher) for cls in chosen]

    @property
    def names(self) -> list[str]:
        """The installed probes' names, in install order."""
        return [p.name for p in self._probes]

    def install(self) -> None:
        session = self.session
        self.patcher.patch(warnings, "showwarning", attributed)
        for probe in self._probes:
            try:
                probe.install()
            except Exception as exc:  # a torch this probe does not know: the others still watch
                session.fail(probe.name, exc)
                continue
            session.clock.subscribe(probe)
            if type(probe).on_module_output is not Probe.on_module_output:
                session.output_listeners.append(probe.on_module_output)
        self.patcher.sync_ops()

    def uninstall(self) -> None:
        session = self.session
        for probe in reversed(self._probes):
            try:
                probe.uninstall()
            except Exception as exc:  # the rest still comes down, and torch is restored below
                session.fail(probe.name, exc)
            session.clock.unsubscribe(probe)
        session.output_listeners.clear()
        self.patcher.restore()


__all__ = ["PROBES", "Probe", "Probes", "probe_signals", "selected"]
