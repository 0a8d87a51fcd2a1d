"""The Lightning callback, and the entry point that adds it when ``TRAINDOC=1``.

    L.Trainer(callbacks=[traindoc.lightning.TraindocCallback(json="report.json")])

gives what ``traindoc run --json report.json train.py`` gives: the same probes, detectors and
report. The session starts in ``setup("fit")``, before Lightning's strategy builds the
optimizers (``configure_optimizers``) and its precision plugin casts the module
(``precision="bf16-true"``), so both are seen as in a plain loop; the report is written in
``teardown("fit")``. Lightning's ``accumulate_grad_batches``, ``gradient_clip_val`` and manual
optimization run through the same torch calls the probes watch. What the module logs with
``self.log`` is read at the end of each validation epoch, as a script's own logging is read.

The engine's state is the callback's ``state_dict`` (``Engine.state_dict``: the findings so far
and each detector's history, plain data that loads under ``weights_only=True``): a fit resumed
from a Lightning checkpoint (``trainer.fit(model, ckpt_path=...)``) keeps the findings in its
report and its detectors go on where they stopped (a clip counted before the resume counts
after it). The resumed session's steps go on from the restored ``trainer.global_step`` (known
in ``on_train_start``), so findings quote the step numbers the user sees.

``TRAINDOC=1 python train.py`` adds the callback with no code change, through Lightning's
``lightning.pytorch.callbacks_factory`` entry point (``callbacks_factory`` below).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

import lightning.pytorch as pl

from traindoc.engine import Report
from traindoc.findings import Finding
from traindoc.integrations._doctor import Doctor
from traindoc.integrations._options import OptionArgs, TrainingFindings

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.12 (PEP 692); we support 3.10

__all__ = ["TraindocCallback", "TrainingFindings", "callbacks_factory"]


class TraindocCallback(pl.Callback):
    """Observe ``trainer.fit``; write the report when it ends.

    The keywords are ``integrations._options.Options``: ``json``/``html``: report files;
    ``fail_on``: raise ``TrainingFindings`` at the end of a fit with findings at or above this
    severity ("error", "warning", "info"); ``level``: "cheap" | "standard" | "thorough";
    ``select``/``ignore``: failure ids; ``export``: True sends each finding when it first fires
    to the trainer's loggers (TensorBoardLogger, WandbLogger, MLFlowLogger), or a list of
    names/tracker objects.
    """

    def __init__(self, **options: Unpack[OptionArgs]) -> None:
        self.doctor = Doctor(**options)
        self._status = "ok"
        self._active = False

    @property
    def findings(self) -> list[Finding]:
        """The findings so far (all of them once the fit ended)."""
        return self.doctor.findings

    @property
    def report(self) -> Report | None:
        """The report, once the fit ended (None before, or when another session owns it)."""
        return self.doctor.report

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        # One traindoc callback per trainer: one given in code wins over the entry point's.
        first = next(cb for cb in getattr(trainer, "callbacks", [self]) if isinstance(cb, TraindocCallback))
        self._active = first is self
        if not self._active:
            return
        self._status = "ok"
        loggers: list[object] = []
        logger: Any  # Lightning's Logger base class has no experiment; its subclasses do
        for logger in trainer.loggers:
            kind = type(logger).__name__
            if kind in ("TensorBoardLogger", "WandbLogger"):
                loggers.append(logger.experiment)
            elif kind == "MLFlowLogger":
                loggers.append((logger.experiment, logger.run_id))
        self.doctor.start(pl_module, None, loggers,
                          tensorboard_dir=os.path.join(trainer.default_root_dir, "traindoc"))

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._active and self.doctor.running and trainer.global_step > 0:  # a resumed fit
            self.doctor.watch.session.resume_at(trainer.global_step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if self._active:
            self.doctor.poll()

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._active and not trainer.sanity_checking:
            self.doctor.publish("lightning", dict(trainer.callback_metrics))
            self.doctor.poll()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._status = "interrupted" if isinstance(exception, KeyboardInterrupt) else "exception"
        if self._active:
            self.doctor.finish(self._status)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and self._active:
            self._active = False
            self.doctor.finish(self._status)

    def state_dict(self) -> dict[str, Any]:
        return {"engine": self.doctor.state_dict()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.doctor.load_state_dict(state_dict.get("engine", {}))


def callbacks_factory() -> list[pl.Callback]:
    """Lightning's ``callbacks_factory`` entry point: the callback when ``TRAINDOC`` is set."""
    from traindoc.config import autostart_enabled

    return [TraindocCallback()] if autostart_enabled() else []
