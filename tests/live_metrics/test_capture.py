"""Zero-code capture of what a script logs: TensorBoard, wandb, mlflow, csv, traindoc.log.

The logging libraries are optional: wandb and mlflow are tiny fakes (``fakes/``) shaped like
the real packages; TensorBoard is the real ``torch.utils.tensorboard`` when installed.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Iterator

import pytest
import torch
import torch.nn as nn

import traindoc
from traindoc import metrics as api
from traindoc.events import Scalar

FAKES = str(Path(__file__).parent / "fakes")


def scalars(events: list[object]) -> list[tuple[int, str, float]]:
    return [(e.step, e.name, e.value) for e in events if isinstance(e, Scalar)
            and e.name not in ("loss", "lr", "grad_norm")]


def tiny_steps(n: int, log: object) -> None:
    """n optimizer steps of a tiny model; ``log(step)`` after each step."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(n):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        log(step)  # type: ignore[operator]


def watched(fn: object) -> tuple[traindoc.live.watch.Watch, list[object]]:
    events: list[object] = []
    with traindoc.watch(announce=False) as doc:
        doc.session.event_listeners.append(events.append)
        fn()  # type: ignore[operator]
    return doc, events


@pytest.fixture
def fakes() -> Iterator[None]:
    sys.path.insert(0, FAKES)
    try:
        yield
    finally:
        sys.path.remove(FAKES)
        for name in [m for m in sys.modules if m.split(".")[0] in ("wandb", "mlflow")]:
            del sys.modules[name]


def test_tensorboard_scalars_become_signals_at_the_current_step(tmp_path: Path) -> None:
    tb = pytest.importorskip("torch.utils.tensorboard")
    writer = tb.SummaryWriter(str(tmp_path))

    def run() -> None:
        def log(step: int) -> None:
            writer.add_scalar("Accuracy/train", 0.5 + step / 100, step)
            writer.add_scalars("acc", {"val": 0.25, "test": 0.2}, step)
            writer.add_scalar("Loss/train", torch.tensor(1.5), step)  # the live face owns loss
            writer.add_scalar("epoch", step, step)  # bookkeeping: skipped
        tiny_steps(3, log)

    _, events = watched(run)
    got = scalars(events)
    # Logged after optimizer.step(): the value belongs to the next step's round, as a
    # validation metric logged after an epoch's last step does.
    assert (1, "train_acc", 0.5) in got and (3, "train_acc", 0.52) in got
    assert (1, "val_acc", 0.25) in got
    assert (1, "metric.acc_test", pytest.approx(0.2)) in got
    assert (1, "metric.loss_train", 1.5) in got
    assert not any(name == "loss" for _, name, _ in got)
    assert not any("epoch" in name for _, name, _ in got)
    writer.close()


def test_summarywriter_is_patched_while_watching_and_restored(tmp_path: Path) -> None:
    tb = pytest.importorskip("torch.utils.tensorboard")
    original = tb.SummaryWriter.add_scalar
    with traindoc.watch(announce=False):
        assert tb.SummaryWriter.add_scalar is not original
    assert tb.SummaryWriter.add_scalar is original


def test_wandb_run_log_is_captured_after_init_and_never_clobbered(fakes: None) -> None:
    with traindoc.watch(announce=False) as doc:
        events: list[object] = []
        doc.session.event_listeners.append(events.append)
        import wandb  # imported while watching: patched by the import hook

        with pytest.raises(RuntimeError, match="wandb.init"):
            wandb.log({"val_acc": 0.1})  # the library's own behaviour is unchanged
        run = wandb.init(project="x")
        tiny_steps(2, lambda step: wandb.log({"train": {"acc": 0.9}, "val/acc": 0.4, "img": object()}))
    assert wandb.logged[-1]["val/acc"] == 0.4  # the real call happened, with the same data
    got = scalars(events)
    assert (1, "train_acc", 0.9) in got and (2, "val_acc", 0.4) in got
    n = len(events)
    wandb.log({"val_acc": 0.3})  # bound while watching: still the library's call, captured no more
    assert wandb.logged[-1] == {"val_acc": 0.3} and len(events) == n
    assert wandb.log.__self__ is run  # wandb.init's rebinding survives the uninstall
    from wandb.sdk.wandb_run import Run

    assert not getattr(Run.log, "__traindoc__", False)


def test_mlflow_fluent_and_client_calls_are_captured_once(fakes: None) -> None:
    with traindoc.watch(announce=False) as doc:
        events: list[object] = []
        doc.session.event_listeners.append(events.append)
        import mlflow

        def log(step: int) -> None:
            mlflow.log_metric("val_f1", 0.3, step=step)
            mlflow.log_metrics({"train_f1": 0.6, "val_loss": 1.2})
            mlflow.MlflowClient().log_metric("run0", "expert_gini", 0.5)
        tiny_steps(2, log)
    got = scalars(events)
    assert [n for s, n, _ in got if s == 1] == ["val_f1", "train_f1", "val_loss", "expert_gini"]
    from mlflow.tracking.client import logged

    assert len(logged) == 8  # every call reached the library


def test_csv_rows_are_read_and_the_file_is_byte_identical(tmp_path: Path) -> None:
    def write(path: Path) -> None:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["Epoch", "LR", "Train_Loss", "Train_F1", "Val_F1", "Val_SHD", "Expert_Gini"])
            tiny_steps(3, lambda step: w.writerow([step, 0.001, 0.5, 0.2, 0.1 * step, 13, 0.3]))
        with open(path.with_suffix(".dict.csv"), "w", newline="") as f:
            d = csv.DictWriter(f, fieldnames=["epoch", "val_acc"])
            d.writeheader()
            d.writerow({"epoch": 0, "val_acc": 0.75})

    write(tmp_path / "bare.csv")
    _, events = watched(lambda: write(tmp_path / "watched.csv"))
    assert (tmp_path / "bare.csv").read_bytes() == (tmp_path / "watched.csv").read_bytes()
    assert (tmp_path / "bare.dict.csv").read_bytes() == (tmp_path / "watched.dict.csv").read_bytes()
    got = scalars(events)
    assert (1, "train_f1", 0.2) in got and (2, "val_f1", 0.1) in got and (1, "expert_gini", 0.3) in got
    assert (1, "metric.val_shd", 13.0) in got and (1, "metric.lr", 0.001) in got
    assert (3, "val_acc", 0.75) in got


def test_csv_without_a_header_or_signals_is_left_alone() -> None:
    buf = io.StringIO()

    def run() -> None:
        w = csv.writer(buf)
        w.writerow([1, 2, 3])  # no header: nothing can be named
        w.writerow([4, 5, 6])
        v = csv.writer(io.StringIO())
        v.writerow(["id", "prediction"])
        v.writerow(["a", "0.5"])

    _, events = watched(run)
    assert scalars(events) == []
    assert buf.getvalue() == "1,2,3\r\n4,5,6\r\n"


def test_traindoc_log_maps_names_and_reads_tensors() -> None:
    traindoc.log(val_acc=0.5)  # not watching: a no-op
    assert api.log_sinks == []

    def run() -> None:
        tiny_steps(2, lambda step: traindoc.log({"val/acc": torch.tensor(0.25)}, train_acc=0.75, custom=3))

    _, events = watched(run)
    got = scalars(events)
    assert (1, "val_acc", 0.25) in got and (1, "train_acc", 0.75) in got and (1, "metric.custom", 3.0) in got
    assert api.log_sinks == []


def test_two_sources_of_one_signal_keep_the_first_as_the_signal(tmp_path: Path) -> None:
    def run() -> None:
        def log(step: int) -> None:
            traindoc.log(val_acc=0.5)
            traindoc.log(**{"Val_Accuracy": 0.6})
        tiny_steps(1, log)

    _, events = watched(run)
    got = scalars(events)
    assert (1, "val_acc", 0.5) in got and (1, "metric.val_accuracy", 0.6) in got


def test_a_failing_capture_is_disabled_and_never_reaches_the_user(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from traindoc.live.probes import publisher as probe

    def broken(self: object, channel: str, values: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(probe.Publisher, "publish", broken)
    with traindoc.watch(announce=False) as doc:
        tiny_steps(2, lambda step: traindoc.log(val_acc=0.5))
    assert ("probe:metrics", "RuntimeError: boom") in doc.report().disabled
    assert capsys.readouterr().err.count("internal error in probe 'metrics'") == 1


def test_import_hook_is_removed_on_exit() -> None:
    before = list(sys.meta_path)
    with traindoc.watch(announce=False):
        assert len(sys.meta_path) == len(before) + 1
    assert sys.meta_path == before
