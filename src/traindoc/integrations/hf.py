"""The Hugging Face ``Trainer`` callback (TRL's trainers are Trainers too).

    Trainer(..., callbacks=[traindoc.hf.TraindocCallback(json="report.json")])

gives what ``traindoc run --json report.json train.py`` gives: the same probes, detectors and
report. The session starts in ``on_train_begin``, where Trainer has already built its optimizer
inside ``train()`` (the callback hands it, unwrapped from Accelerate, to the session), and the
report is written in ``on_train_end``. ``on_log`` hands what Trainer logs (its pre-clip
``grad_norm``, the loss its ``logging_nan_inf_filter`` may have smoothed, the evaluation
metrics) to the live face as a script's own logging is read: as ``metric.*`` beside the values
measured live, and the evaluation metrics as their signals (``eval_loss`` -> ``val_loss``).
Training resumed with ``trainer.train(resume_from_checkpoint=...)`` goes on from the restored
``state.global_step``, so findings quote the step numbers the user sees. Each checkpoint folder
Trainer writes gets ``traindoc_state.json`` (``on_save``: the findings and the detectors' history,
``Engine.state_dict`` as JSON); a run resumed from ``output_dir/checkpoint-<global_step>`` (what
``resume_from_checkpoint=True`` picks) goes on from it. Trainer's own callback-state mechanism
is not used: it is off by default and replaces the user's callback object with a new one.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from traindoc.engine import Report
from traindoc.findings import Finding
from traindoc.integrations._doctor import Doctor
from traindoc.integrations import plain_json
from traindoc.integrations._options import OptionArgs, TrainingFindings

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.12 (PEP 692); we support 3.10

__all__ = ["TraindocCallback", "TrainingFindings"]


class TraindocCallback(TrainerCallback):
    """Observe a Trainer's training; write the report when it ends.

    The keywords are ``integrations._options.Options``: ``json``/``html``: report files; ``fail_on``: raise ``TrainingFindings`` at the end of a
    training with findings at or above this severity ("error", "warning", "info");
    ``level``: "cheap" | "standard" | "thorough"; ``select``/``ignore``: failure ids;
    ``export``: True sends each finding when it first fires to the trackers in
    ``args.report_to`` (W&B, MLflow, TensorBoard), or a list of names/tracker objects.
    """

    def __init__(self, **options: Unpack[OptionArgs]) -> None:
        self.doctor = Doctor(**options)

    @property
    def findings(self) -> list[Finding]:
        """The findings so far (all of them once training ended)."""
        return self.doctor.findings

    @property
    def report(self) -> Report | None:
        """The report, once training ended (None before, or when another session owns it)."""
        return self.doctor.report

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: Any = None, optimizer: Any = None, **kwargs: Any) -> None:
        inner = getattr(optimizer, "optimizer", optimizer)  # Accelerate's AcceleratedOptimizer
        names = [args.report_to] if isinstance(args.report_to, str) else list(args.report_to or [])
        report_to = [n for n in names if n in ("wandb", "mlflow", "tensorboard")]
        tb_dir = os.environ.get("TENSORBOARD_LOGGING_DIR") or os.path.join(args.output_dir or ".", "runs", "traindoc")
        self.doctor.start(model, inner, report_to, tensorboard_dir=tb_dir)
        if self.doctor.running and state.global_step > 0:  # resume_from_checkpoint restored it
            self.doctor.watch.session.resume_at(state.global_step)
            saved = _state_file(args, state.global_step)
            if os.path.isfile(saved):
                try:
                    with open(saved, encoding="utf-8") as f:
                        self.doctor.load_state_dict(plain_json.loads(f.read()))
                except (OSError, ValueError) as exc:  # a damaged file: the run goes on, fresh
                    _warn(f"could not read {saved} ({exc}); the detectors start afresh")

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        folder = os.path.dirname(_state_file(args, state.global_step))
        if not self.doctor.running or not os.path.isdir(folder):
            return
        try:
            text = plain_json.dumps(self.doctor.state_dict())
            tmp = os.path.join(folder, f".{_STATE}.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, os.path.join(folder, _STATE))
        except (OSError, TypeError, ValueError) as exc:  # never the user's checkpoint's problem
            _warn(f"could not save traindoc's state in {folder} ({exc})")

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        self.doctor.poll()

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if logs:
            self.doctor.publish("hf-trainer", {k: v for k, v in logs.items() if k != "epoch"})
            self.doctor.poll()

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        self.doctor.finish("ok")


_STATE = "traindoc_state.json"


def _state_file(args: TrainingArguments, step: int) -> str:
    """Where Trainer keeps the checkpoint of ``step`` (its ``checkpoint-<step>`` folder)."""
    return os.path.join(args.output_dir or ".", f"checkpoint-{step}", _STATE)


def _warn(text: str) -> None:
    sys.stderr.write(f"traindoc: {text}\n")
