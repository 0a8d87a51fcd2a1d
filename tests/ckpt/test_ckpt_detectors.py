"""Each checkpoint detector fires on a checkpoint that shows its failure and stays quiet on a
healthy one; the shared detectors (frozen-parameters, bf16-master-weights, nonfinite) read the
same events from a checkpoint as from live hooks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ckpt_fixtures import Made, made, setup, train, training_state  # noqa: F401
from traindoc import config
from traindoc.analyze import analyze
from traindoc.events import BatchNormState, ParamStats
from traindoc.sources.ckpt import produce

LR = "lr-overridden-by-checkpoint"


def _report(events, expect_lr: float | None = None):  # type: ignore[no-untyped-def]
    settings = config.Settings()
    if expect_lr is not None:
        settings = dataclasses.replace(settings, detectors={LR: {"expected_lr": expect_lr}})
    report = analyze(events, settings=settings)
    assert not report.disabled, report.disabled
    return report


def _ids(report) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {f.id: f for f in report.findings}


def inspect(path, **kw):  # type: ignore[no-untyped-def]
    return _report(produce.inspect(path)[0], **kw)


def diff(pair, **kw):  # type: ignore[no-untyped-def]
    return _report(produce.diff(*pair)[0], **kw)


# --- checkpoint-incomplete ------------------------------------------------------------------


def test_incomplete_fires_on_weights_and_step_only(made: Made) -> None:
    f = _ids(inspect(made.weights_only_epoch))["checkpoint-incomplete"]
    assert f.step == 300 and f.evidence["missing"] == ["optimizer"]
    assert "no optimizer: Adam moments" in f.message and "last.pt" in f.message


def test_incomplete_fires_on_missing_scheduler_only_when_one_was_used(made: Made, tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = _ids(inspect(made.no_scheduler))["checkpoint-incomplete"]
    assert f.evidence["missing"] == ["scheduler"] and "initial_lr" in f.message
    model = torch.nn.Linear(3, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # no scheduler at all: none to save
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 1}, tmp_path / "a.pt")
    assert "checkpoint-incomplete" not in _ids(inspect(tmp_path / "a.pt"))


def test_incomplete_quiet_on_complete_and_not_applicable_to_bare_weights(made: Made) -> None:
    assert "checkpoint-incomplete" not in _ids(inspect(made.complete))
    assert "checkpoint-incomplete" not in _ids(inspect(made.hf))
    for bare in (made.safetensors, made.bare, made.lightning_weights):
        report = inspect(bare)
        reasons = dict(report.not_applicable)
        assert "checkpoint-incomplete" in reasons and "not bare weights" in reasons["checkpoint-incomplete"]


def test_incomplete_hf_folder_saved_with_save_only_model(made: Made) -> None:
    f = _ids(inspect(made.hf_model_only))["checkpoint-incomplete"]
    assert f.evidence["missing"] == ["optimizer"] and "save_only_model" in f.cause


def test_incomplete_required_parts_are_configurable(made: Made) -> None:
    events = produce.inspect(made.hf)[0]
    settings = config.Settings(detectors={"checkpoint-incomplete": {"required": ["optimizer", "scaler"]}})
    f = _ids(analyze(events, settings=settings))["checkpoint-incomplete"]
    assert f.evidence["missing"] == ["scaler"]
    with pytest.raises(ValueError, match="required must name parts"):
        analyze(events, settings=config.Settings(detectors={"checkpoint-incomplete": {"required": ["weights"]}}))


# --- stale-bn-eval --------------------------------------------------------------------------


def test_stale_bn_fires_on_ema_without_buffers(made: Made) -> None:
    f = _ids(inspect(made.ema_bad[1]))["stale-bn-eval"]
    assert f.severity == "error" and f.step == 8 and f.where == ("bn",)
    assert "EMA" in f.message and "running_var all 1" in f.message and "affine weight/bias moved" in f.message
    assert f.evidence["role"] == "ema"


def test_stale_bn_fires_on_ema_frozen_between_checkpoints(made: Made) -> None:
    f = _ids(diff(made.ema_frozen))["stale-bn-eval"]
    assert "bit-identical running statistics" in f.message and f.step == 500


def test_stale_bn_quiet_on_healthy_ema_and_fresh_model(made: Made) -> None:
    assert "stale-bn-eval" not in _ids(inspect(made.ema_good[1]))
    assert "stale-bn-eval" not in _ids(diff(made.ema_good))
    assert "stale-bn-eval" not in _ids(inspect(made.fresh))  # step 0: initial statistics expected
    events = produce.inspect(made.fresh)[0]
    bn = [e for e in events if isinstance(e, BatchNormState)]
    assert bn and all(e.mean_at_init and e.var_at_init and e.affine_at_init for e in bn)


def test_stale_bn_fires_when_the_model_itself_never_trained_its_bn(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, opt, sched = setup()
    model.eval()  # BatchNorm never sees a batch in train mode
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        loss = model(torch.randn(4, 3, 8, 8, generator=g)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save(training_state(model, opt, sched, 3), tmp_path / "evalmode.pt")
    f = _ids(inspect(tmp_path / "evalmode.pt"))["stale-bn-eval"]
    assert f.evidence["role"] == "model" and "eval mode" in f.cause


# --- lr-overridden-by-checkpoint -------------------------------------------------------------


def test_lr_quiet_without_expectation_on_consistent_state(made: Made) -> None:
    for path in (made.complete, made.hf, made.lightning, made.onecycle, made.no_scheduler):
        assert LR not in _ids(inspect(path)), path


def test_lr_fires_on_expect_lr_mismatch(made: Made) -> None:
    f = _ids(inspect(made.complete, expect_lr=3e-4))[LR]
    assert "stores initial_lr 0.001" in f.message and "you configure lr 3.00e-04" in f.message
    assert f.evidence["configured_lr"] == 3e-4 and "g['initial_lr'] = 3.00e-04" in f.fix


def test_lr_quiet_when_expected_matches_mid_warmup_and_onecycle(made: Made, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, opt, sched = setup(warmup=100)  # mid-warmup: stored lr is 1e-3 * 3/100, initial_lr 1e-3
    train(model, opt, sched, 2)
    torch.save(training_state(model, opt, sched, 2), tmp_path / "warm.pt")
    assert LR not in _ids(inspect(tmp_path / "warm.pt", expect_lr=1e-3))
    assert LR in _ids(inspect(tmp_path / "warm.pt", expect_lr=3e-5))  # not the current LR either
    assert LR not in _ids(inspect(made.onecycle, expect_lr=0.8))  # OneCycleLR: max_lr is configured


def test_lr_fires_when_param_groups_contradict_the_scheduler(made: Made) -> None:
    f = _ids(inspect(made.lr_overwritten))[LR]
    assert "disagrees with the stored scheduler's _last_lr" in f.message and f.step == 120


def test_lr_not_applicable_without_optimizer_state(made: Made) -> None:
    assert LR in dict(inspect(made.safetensors).not_applicable)


# --- shared detectors on checkpoint events --------------------------------------------------


def test_seed_002_frozen_norms_are_named(made: Made) -> None:
    ids = _ids(diff(made.bf16))
    f = ids["frozen-parameters"]
    assert "norm.weight" in f.where and "bn.weight" in f.where
    assert "fc.weight" not in f.where  # the matrices did move
    assert "bf16-master-weights" in ids


def test_bf16_master_weights_from_one_checkpoint(made: Made) -> None:
    _, new = made.bf16
    assert "bf16-master-weights" in _ids(inspect(new))
    assert "bf16-master-weights" not in _ids(inspect(made.complete))
    # a bf16 weights file for inference is not training in bf16: no optimizer, no finding
    assert "bf16-master-weights" not in _ids(inspect(made.safetensors))


def test_healthy_diff_is_quiet(made: Made) -> None:
    report = diff(made.ema_good)
    assert not report.findings, [f.message for f in report.findings]


def test_nonfinite_tensor_events(made: Made) -> None:
    events, summary = produce.inspect(made.nan)
    bad = [e for e in events if isinstance(e, ParamStats) and e.norm != e.norm]
    assert [e.name for e in bad] == ["fc.weight"]
    assert [r.nonfinite for r in summary.tensors if r.name == "fc.weight"] == [3]
    assert "nonfinite" in _ids(_report(events))
