"""Findings where users already look: W&B, MLflow and TensorBoard, with the libraries' own APIs.

Opt-in (a callback's ``export=``). When a finding first fires it goes to each tracker:

- W&B: ``run.alert`` (error -> ERROR, warning -> WARN, info -> INFO) and a ``traindoc/findings``
  table of every finding so far, logged with ``commit=False`` so the run's own step counter
  does not move; at the end the JSON report as an artifact of type ``traindoc-report``.
- MLflow: a tag ``traindoc.<id>`` on the run and ``traindoc/findings.json`` as an artifact; at
  the end ``traindoc/report.json``.
- TensorBoard: ``add_text("traindoc/findings", ...)`` at the finding's step; at the end the
  report's summary as ``traindoc/report``.

A tracker that raises is dropped with one line on stderr: exporting never stops the training.
The tracker libraries are never imported here unless the user's run already uses them.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol, Sequence

from traindoc.engine import Report
from traindoc.findings import Finding

NAMES = ("wandb", "mlflow", "tensorboard")
_WANDB_LEVEL = {"error": "ERROR", "warning": "WARN", "info": "INFO"}
_COLUMNS: list[Any] = ["step", "severity", "id", "message"]


class Tracker(Protocol):
    name: str

    def finding(self, f: Finding, so_far: list[Finding]) -> None: ...

    def report(self, report: Report, json_text: str) -> None: ...


def line(f: Finding) -> str:
    at = f" at step {f.step}" if f.step is not None else ""
    return f"[{f.severity}] {f.id}{at}: {f.message}"


class Wandb:
    name = "wandb"

    def __init__(self, run: Any) -> None:
        self.run = run

    def finding(self, f: Finding, so_far: list[Finding]) -> None:
        import wandb

        self.run.alert(title=f"traindoc: {f.id}"[:63], text=f"{line(f)}\nFix: {f.fix}",
                       level=_WANDB_LEVEL.get(f.severity, "INFO"))
        rows = [[g.step if g.step is not None else -1, g.severity, g.id, g.message] for g in so_far]
        self.run.log({"traindoc/findings": wandb.Table(columns=_COLUMNS, data=rows)}, commit=False)

    def report(self, report: Report, json_text: str) -> None:
        import wandb

        artifact = wandb.Artifact(name="traindoc-report", type="traindoc-report")
        with artifact.new_file("report.json", mode="w", encoding="utf-8") as out:
            out.write(json_text)
        self.run.log_artifact(artifact)


class Mlflow:
    name = "mlflow"

    def __init__(self, client: Any, run_id: str) -> None:
        self.client, self.run_id = client, run_id

    def finding(self, f: Finding, so_far: list[Finding]) -> None:
        # A tag value is at most 5000 characters in every MLflow store.
        self.client.set_tag(self.run_id, f"traindoc.{f.id}", line(f)[:5000])
        self.client.log_dict(self.run_id, {"findings": [g.to_dict() for g in so_far]},
                             "traindoc/findings.json")

    def report(self, report: Report, json_text: str) -> None:
        self.client.log_text(self.run_id, json_text, "traindoc/report.json")


class TensorBoard:
    name = "tensorboard"

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    def finding(self, f: Finding, so_far: list[Finding]) -> None:
        text = f"**{f.severity}** `{f.id}`: {f.message}\n\nFix: {f.fix}"
        self.writer.add_text("traindoc/findings", text, global_step=f.step or 0)
        self.writer.flush()

    def report(self, report: Report, json_text: str) -> None:
        steps = report.run.get("steps", 0)
        body = "\n".join(f"- {line(f)}" for f in report.findings) or "no findings"
        step = steps if isinstance(steps, int) else 0
        self.writer.add_text("traindoc/report", f"traindoc report, {steps} steps:\n\n{body}", global_step=step)
        self.writer.flush()


def wrap(target: object) -> Tracker | None:
    """A tracker for a live tracker object: a W&B run, an MLflow client with its run id as
    ``(client, run_id)``, a TensorBoard SummaryWriter; None for anything else."""
    if isinstance(target, tuple) and len(target) == 2 and hasattr(target[0], "set_tag"):
        return Mlflow(target[0], str(target[1]))
    if hasattr(target, "alert") and hasattr(target, "log_artifact"):
        return Wandb(target)
    if hasattr(target, "add_text") and hasattr(target, "flush"):
        return TensorBoard(target)
    return None


def by_name(name: str, tensorboard_dir: str | None = None) -> Tracker | None:
    """The run the script already started with that library (``wandb.init``,
    ``mlflow.start_run``), or for TensorBoard a writer of our own in ``tensorboard_dir``."""
    if name == "wandb":
        wandb = sys.modules.get("wandb")
        run = getattr(wandb, "run", None) if wandb is not None else None
        return Wandb(run) if run is not None else None
    if name == "mlflow":
        mlflow = sys.modules.get("mlflow")
        active = mlflow.active_run() if mlflow is not None else None
        if mlflow is None or active is None:
            return None
        return Mlflow(mlflow.MlflowClient(), active.info.run_id)
    if name == "tensorboard" and tensorboard_dir:
        from torch.utils.tensorboard import SummaryWriter

        return TensorBoard(SummaryWriter(log_dir=tensorboard_dir))
    return None


def resolve(export: bool | Sequence[object], framework: Sequence[object],
            tensorboard_dir: str | None = None) -> list[Tracker]:
    """The trackers to send to. ``export=True``: the trackers the framework already reports to
    (``framework``: its tracker objects, or names for the runs the script started); a list:
    those names ("wandb", "mlflow", "tensorboard") and objects. A TensorBoard asked for by name
    gets a writer of its own in ``tensorboard_dir``."""
    if export is False or export is None:
        return []
    if export is True:
        wanted: Sequence[object] = framework
    elif isinstance(export, str):
        wanted = [export]
    else:
        wanted = export
    out: list[Tracker] = []
    for item in wanted:
        if isinstance(item, str):
            if item not in NAMES:
                raise ValueError(f"export: unknown tracker {item!r}; use {', '.join(NAMES)} or a tracker object")
            # The framework's own logger of that kind first (Lightning's TensorBoardLogger).
            tracker = next((t for t in map(wrap, framework) if t is not None and t.name == item), None)
            tracker = tracker or by_name(item, tensorboard_dir)
            if tracker is None:
                sys.stderr.write(f"traindoc: export to {item}: no active {item} run found; "
                                 f"start it before training (findings are not sent there)\n")
        else:
            tracker = wrap(item)
            if tracker is None:
                raise ValueError(f"export: {type(item).__name__} is not a W&B run, a SummaryWriter "
                                 "or an (MlflowClient, run_id) pair")
        if tracker is not None and all(t.name != tracker.name for t in out):
            out.append(tracker)
    return out


def send_finding(trackers: list[Tracker], f: Finding, so_far: list[Finding]) -> None:
    _each(trackers, "a finding", lambda t: t.finding(f, so_far))


def send_report(trackers: list[Tracker], report: Report, json_text: str) -> None:
    _each(trackers, "the report", lambda t: t.report(report, json_text))


def _each(trackers: list[Tracker], what: str, action: Any) -> None:
    for t in list(trackers):
        try:
            action(t)
        except Exception as exc:  # a tracker failing must never stop the training
            trackers.remove(t)
            sys.stderr.write(f"traindoc: could not send {what} to {t.name}, stopped exporting there: "
                             f"{type(exc).__name__}: {exc}\n")

