"""A checkpoint is a training checkpoint by what it holds beside the weights (issue 29): the
run's config or arguments, a best or validation metric, a history. Saved with no optimizer,
scheduler, step or RNG it is ``checkpoint-incomplete``, saying what is missing; bare weights and
exports stay exports. Each shape is written as a different kind of training code saves it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ckpt_fixtures import setup, train
from traindoc.analyze import analyze
from traindoc.cli import main
from traindoc.sources.ckpt import produce

INCOMPLETE = "checkpoint-incomplete"


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    m, opt, sched = setup()
    train(m, opt, sched, 3)
    return m


def _judged(path: Path) -> tuple[dict[str, object], object]:
    events, summary = produce.inspect(path)
    report = analyze(events)
    assert not report.disabled, report.disabled
    return {f.id: f for f in report.findings}, summary


# (file name, what the training loop saved beside the weights)
TRAINING_META = [
    # a classification script: best accuracy and its config
    ("best.pt", lambda sd: {"model_state_dict": sd, "config": {"lr": 0.1}, "best_val_acc": 0.91}),
    # research code: argparse namespace as a dict, the validation loss and a history
    ("ckpt.pth", lambda sd: {"net": sd, "args": {"epochs": 90, "bs": 128}, "val_loss": 0.42,
                             "history": [0.9, 0.6, 0.42]}),
    # Lightning-like hyperparameters with a metric, saved by hand
    ("run/last.ckpt", lambda sd: {"state_dict": sd, "hyper_parameters": {"lr": 1e-3}, "best_score": 0.77}),
]


@pytest.mark.parametrize("name,saved", TRAINING_META, ids=[t[0] for t in TRAINING_META])
def test_training_metadata_without_training_state_is_incomplete(  # type: ignore[no-untyped-def]
        tmp_path: Path, model, name: str, saved) -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(saved(model.state_dict()), path)
    found, summary = _judged(path)
    f = found[INCOMPLETE]
    assert f.evidence["missing"] == ["optimizer", "step"]
    assert f.evidence["also_absent"] == ["scheduler", "scaler", "rng"]
    assert "beside the weights" in f.message and "no optimizer, step" in f.message
    assert "Also absent: scheduler (needed if the run stepped an LR scheduler" in f.message
    assert summary.training  # type: ignore[attr-defined]


@pytest.mark.parametrize("name,saved", [
    ("pytorch_model.bin", lambda sd: sd),
    ("model.pt", lambda sd: sd),
    ("model_final.pt", lambda sd: {"model": sd, "config": {"width": 16}}),  # an export with its config
    ("export.pt", lambda sd: {"state_dict": sd, "model_config": {"layers": 2}}),
], ids=["pytorch_model.bin", "plain-state-dict", "final-with-config", "export-with-model-config"])
def test_exports_stay_exports(tmp_path: Path, model, name: str, saved) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    torch.save(saved(model.state_dict()), path)
    found, summary = _judged(path)
    assert INCOMPLETE not in found and not summary.training  # type: ignore[attr-defined]


def test_safetensors_export_stays_an_export(tmp_path: Path, model) -> None:  # type: ignore[no-untyped-def]
    from safetensors.torch import save_file

    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    found, summary = _judged(path)
    assert INCOMPLETE not in found and not summary.training  # type: ignore[attr-defined]


def test_complete_training_dict_with_metadata_is_quiet(tmp_path: Path) -> None:
    m, opt, sched = setup()
    train(m, opt, sched, 3)
    path = tmp_path / "checkpoint.pt"
    torch.save({"model_state_dict": m.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "epoch": 3, "config": {"lr": 0.1}, "best_val_acc": 0.9}, path)
    found, _ = _judged(path)
    assert INCOMPLETE not in found


def test_cli_says_what_is_missing(tmp_path: Path, model, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "best.pt"
    torch.save({"model_state_dict": model.state_dict(), "config": {"lr": 0.1}, "best_val_acc": 0.91}, path)
    assert main(["ckpt", "inspect", str(path)]) == 0
    err = capsys.readouterr()
    text = err.out + err.err
    assert "checkpoint-incomplete" in text and "holds 'config', 'best_val_acc' beside the weights" in text
