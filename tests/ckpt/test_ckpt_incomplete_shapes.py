"""Incomplete checkpoints in the shapes people write them (seed 000's ``last_checkpoint.pt`` and
``checkpoints/checkpoint_epoch_N.pt``; a state built from ``named_parameters()``, as in
transformers#29903 and DeepSpeed#5489), and tiny updates read from two checkpoints of a run
whose LR is far too low. Each with the healthy twin that must stay quiet."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ckpt_fixtures import Net, setup, train, training_state
from traindoc.analyze import analyze
from traindoc.cli import main
from traindoc.sources.ckpt import produce
from traindoc.sources.ckpt.names import resume_name

INCOMPLETE = "checkpoint-incomplete"


def _found(events) -> dict[str, object]:  # type: ignore[no-untyped-def]
    report = analyze(events)
    assert not report.disabled, report.disabled
    return {f.id: f for f in report.findings}


def _trained_model() -> torch.nn.Module:
    model, opt, sched = setup()
    train(model, opt, sched, 4)
    return model


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return _trained_model()


# --- a resume-style name on bare weights ----------------------------------------------------

@pytest.mark.parametrize("name", ["last_checkpoint.pt", "checkpoints/checkpoint_epoch_7.pt", "latest.pth",
                                  "ckpt_step1000.pt", "lastCheckpoint.pt", "resume.pt"])
def test_bare_weights_under_a_resume_name_are_incomplete(  # type: ignore[no-untyped-def]
        tmp_path: Path, model, name: str) -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    events, summary = produce.inspect(path)
    f = _found(events)[INCOMPLETE]
    assert f.evidence["missing"] == ["optimizer", "step"]  # no scheduler: nothing says one was used
    assert path.name in f.message and summary.training
    assert "named as the checkpoint to resume from, but holds only the model's state_dict" in f.message
    assert "torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict()" in f.fix
    assert any("named like a checkpoint to resume from" in n for n in summary.notes)


@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin", "model.pt", "best_model.pt",
                                  "checkpoint_best.pt", "final.pt", "ema_checkpoint.pt", "step_1000.pt"])
def test_weights_only_exports_are_not_judged(tmp_path: Path, model, name: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    if name.endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file(model.state_dict(), str(path))
    else:
        torch.save(model.state_dict(), path)
    report = analyze(produce.inspect(path)[0])
    assert not report.findings, [f.message for f in report.findings]
    assert "not bare weights" in dict(report.not_applicable)[INCOMPLETE]


def test_resume_name_rules() -> None:
    assert resume_name("checkpoint-500.pt") and resume_name("model_ckpt.pth") and resume_name("last.ckpt")
    assert not resume_name("checkpoint_best.pt") and not resume_name("epoch_10.pt")


def test_model_and_epoch_only_dict(tmp_path: Path, model) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "checkpoint_epoch_3.pt"
    torch.save({"model": model.state_dict(), "epoch": 3}, path)
    f = _found(produce.inspect(path)[0])[INCOMPLETE]
    assert f.evidence["missing"] == ["optimizer"] and "checkpoint_epoch_3.pt" in f.message


def test_cli_exit_codes(tmp_path: Path, model, capsys) -> None:  # type: ignore[no-untyped-def]
    torch.save(model.state_dict(), tmp_path / "last_checkpoint.pt")
    assert main(["ckpt", "inspect", str(tmp_path / "last_checkpoint.pt"), "--fail-on", "warning"]) == 3
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    assert main(["ckpt", "inspect", str(tmp_path / "pytorch_model.bin"), "--fail-on", "warning"]) == 0
    capsys.readouterr()


# --- named_parameters() instead of state_dict() ---------------------------------------------

def _frozen_conv_run() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Net()
    for p in model.conv.parameters():
        p.requires_grad_(False)  # a frozen stem, as in a fine-tune
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    return model, opt


def _trainable_only(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.fixture(scope="module")
def named_pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("named")
    model, opt = _frozen_conv_run()
    out: dict[str, list[Path]] = {"named": [], "state_dict": []}
    for epoch in (2, 6):
        train(model, opt, None, 2 if epoch == 2 else 4)
        for kind, weights in (("named", _trainable_only(model)), ("state_dict", model.state_dict())):
            path = folder / f"{kind}_epoch{epoch}.pt"
            torch.save({"model": weights, "optimizer": opt.state_dict(), "epoch": epoch}, path)
            out[kind].append(path)
    return {k: (v[0], v[1]) for k, v in out.items()}


def test_named_parameters_checkpoint_lost_its_buffers(named_pairs) -> None:  # type: ignore[no-untyped-def]
    old, new = named_pairs["named"]
    for events in (produce.inspect(new)[0], produce.diff(old, new)[0]):
        f = _found(events)[INCOMPLETE]
        assert f.evidence["missing"] == ["buffers"] and f.evidence["lost_buffers"] == ["bn"]
        assert "named_parameters()" in f.message and "state_dict()" in f.fix
    assert any("bn hold weight and bias but no running_mean" in n for n in produce.inspect(new)[1].notes)


def test_state_dict_twin_is_complete(named_pairs) -> None:  # type: ignore[no-untyped-def]
    old, new = named_pairs["state_dict"]
    assert INCOMPLETE not in _found(produce.inspect(new)[0])
    assert INCOMPLETE not in _found(produce.diff(old, new)[0])


def test_no_buffers_without_batchnorm_names_is_not_a_loss(tmp_path: Path) -> None:
    """A model without BatchNorm has no buffers either: nothing is lost."""
    model, opt, sched = setup(bn=False)
    train(model, opt, sched, 3)
    path = tmp_path / "ckpt.pt"
    torch.save(training_state(model, opt, sched, 3), path)
    assert INCOMPLETE not in _found(produce.inspect(path)[0])


# --- tiny-updates from two checkpoints -------------------------------------------------------

def _sgd_pair(folder: Path, lr: float) -> tuple[Path, Path]:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    paths = []
    for step, n in ((5, 5), (105, 100)):
        train(model, opt, None, n)
        paths.append(folder / f"sgd_{lr:g}_{step}.pt")
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, paths[-1])
    return paths[0], paths[1]


def test_tiny_updates_sgd_lr_far_too_low(tmp_path: Path) -> None:
    f = _found(produce.diff(*_sgd_pair(tmp_path, 1e-5))[0])["tiny-updates"]
    assert "SGD-family group 0 (lr 1.00e-05" in f.message and "under a tenth of SGD-family's usual 1e-3" in f.message
    assert f.evidence["median_update_ratio"][0] < 1e-4


def test_tiny_updates_quiet_on_a_healthy_sgd_pair(tmp_path: Path) -> None:
    assert "tiny-updates" not in _found(produce.diff(*_sgd_pair(tmp_path, 0.05))[0])


def test_tiny_updates_adam_lr_far_too_low_and_its_healthy_twin(tmp_path: Path) -> None:
    for lr, fires in ((1e-6, True), (3e-4, False)):
        model, opt, sched = setup(lr=lr, warmup=1)
        train(model, opt, sched, 5)
        torch.save(training_state(model, opt, sched, 5), tmp_path / "a.pt")
        train(model, opt, sched, 100)
        torch.save(training_state(model, opt, sched, 105), tmp_path / "b.pt")
        found = _found(produce.diff(tmp_path / "a.pt", tmp_path / "b.pt")[0])
        assert ("tiny-updates" in found) is fires, lr
        if fires:
            assert "lr 1.00e-06" in found["tiny-updates"].message


# --- without the safetensors package ----------------------------------------------------------

def test_safetensors_file_without_the_package_names_it(  # type: ignore[no-untyped-def]
        tmp_path: Path, model, monkeypatch, capsys) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "model.safetensors"
    save_file(model.state_dict(), str(path))
    renamed = tmp_path / "weights.bin"  # recognised by its header under another name too
    renamed.write_bytes(path.read_bytes())
    for mod in ("safetensors", "safetensors.torch"):
        monkeypatch.setitem(__import__("sys").modules, mod, None)  # import raises ImportError
    for p in (path, renamed):
        assert main(["ckpt", "inspect", str(p)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("Error: ")
        assert "needs the safetensors package: pip install safetensors" in err and "corrupt" not in err
