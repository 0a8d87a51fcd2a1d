"""Readers: every supported layout yields the right parts, step, LRs and tensors."""

from __future__ import annotations

import math

import pytest
import torch

from ckpt_fixtures import Made, made  # noqa: F401
from traindoc.events import Checkpoint, Optimizer, ParamStats
from traindoc.sources.ckpt import produce
from traindoc.sources.ckpt.read import open_checkpoint


def _inspect(path):  # type: ignore[no-untyped-def]
    events, summary = produce.inspect(path)
    ck = next(e for e in events if isinstance(e, Checkpoint))
    return events, summary, ck


@pytest.mark.parametrize("name,fmt,training,has,step", [
    ("complete", "torch-dict", True, {"model", "optimizer", "scheduler", "scaler", "step", "rng"}, 12),
    ("weights_only_epoch", "torch-dict", True, {"model", "step"}, 300),
    ("safetensors", "safetensors", False, {"model"}, None),
    ("bare", "state-dict", False, {"model"}, None),
    ("hf", "hf-folder", True, {"model", "optimizer", "scheduler", "step", "rng"}, 6),
    ("hf_sharded", "hf-folder", True, {"model", "optimizer", "scheduler", "step", "rng"}, 6),
    ("hf_bin", "hf-folder", True, {"model", "optimizer", "scheduler", "step", "rng"}, 6),
    ("hf_model_only", "hf-folder", True, {"model", "step"}, 6),
    ("lightning", "lightning", True, {"model", "optimizer", "scheduler", "step"}, 6),
    ("lightning_weights", "lightning", False, {"model", "step"}, 6),
    ("legacy", "torch-dict", True, {"model", "optimizer", "scheduler", "step"}, 0),
])
def test_layouts(made: Made, name: str, fmt: str, training: bool, has: set[str], step: int | None) -> None:
    _, summary, ck = _inspect(getattr(made, name))
    assert (ck.format, ck.training, set(ck.has), ck.step) == (fmt, training, has, step)
    assert ck.signal == ("train_state" if training else "checkpoint")
    assert summary.tensors and all(r.norm is None or math.isfinite(r.norm) for r in summary.tensors)


def test_tensors_and_norms_match_plain_torch(made: Made) -> None:
    sd = torch.load(made.complete, weights_only=True)["model"]
    events, summary, ck = _inspect(made.complete)
    stats = {e.name: e for e in events if isinstance(e, ParamStats)}
    assert ck.tensors == len(sd) and ck.numel == sum(t.numel() for t in sd.values())
    for name, t in sd.items():
        if t.is_floating_point():
            assert stats[name].norm == pytest.approx(float(t.double().norm()), rel=1e-12)
            assert stats[name].dtype == "torch.float32" and stats[name].numel == t.numel()
    # buffers are reported for nonfinite but never as trainable parameters
    assert not stats["bn.running_var"].requires_grad and stats["fc.weight"].requires_grad


def test_sharded_folder_reads_every_shard(made: Made) -> None:
    _, _, single = _inspect(made.hf)
    _, _, sharded = _inspect(made.hf_sharded)
    assert sharded.tensors == single.tensors and sharded.numel == single.numel


def test_optimizer_event_from_stored_state(made: Made) -> None:
    events, _, ck = _inspect(made.complete)
    (opt,) = [e for e in events if isinstance(e, Optimizer)]
    assert opt.cls == "Adam-family" and opt.step == 12
    (g,) = opt.groups
    assert g.lr == pytest.approx(1e-3) and g.momentum == pytest.approx(0.9)
    assert set(g.dtypes) == {"torch.float32"} and len(g.names) == len(g.dtypes) == 10
    assert g.names[0] == "conv.weight"  # named from the model: same count, same order, same shapes
    assert ck.lrs == (pytest.approx(1e-3),) and ck.initial_lrs == (pytest.approx(1e-3),)
    assert ck.sched_last_lrs == ck.lrs and ck.optimizer_steps == 12


def test_sgd_family_and_intended_update(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ckpt_fixtures import Net, train

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train(model, opt, steps=3)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "sgd.pt")
    events, _, ck = _inspect(tmp_path / "sgd.pt")
    (o,) = [e for e in events if isinstance(e, Optimizer)]
    assert o.cls == "SGD-family" and ck.step is None and ck.optimizer_steps is None
    fc = next(e for e in events if isinstance(e, ParamStats) and e.name == "fc.weight")
    buf = opt.state[model.fc.weight]["momentum_buffer"]
    assert fc.intended == pytest.approx(0.1 * float(buf.double().pow(2).mean().sqrt()), rel=1e-9)


def test_ema_inside_the_model_state_dict_is_split(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sd = {"w": torch.ones(3), "ema_model.w": torch.ones(3)}
    torch.save({"state_dict": sd, "epoch": 2, "optimizer": {"state": {}, "param_groups": []}}, tmp_path / "x.pt")
    ck = open_checkpoint(tmp_path / "x.pt")
    assert ck.model.names() == ["w"] and ck.ema.names() == ["w"] and "ema" in ck.has


def test_numpy_rng_state_loads_without_trust(tmp_path) -> None:  # type: ignore[no-untyped-def]
    np = pytest.importorskip("numpy")
    torch.save({"model": {"w": torch.ones(2)}, "step": 3, "numpy_rng_state": np.random.get_state()},
               tmp_path / "np.pt")
    _, _, ck = _inspect(tmp_path / "np.pt")
    assert "rng" in ck.has and ck.step == 3


def test_hf_training_args_is_never_unpickled(made: Made) -> None:
    _, summary, _ = _inspect(made.hf)
    assert any("training_args.bin" in n for n in summary.notes)


def test_diff_events(made: Made) -> None:
    old, new = made.bf16
    events, d = produce.diff(old, new)
    stats = {e.name: e for e in events if isinstance(e, ParamStats)}
    assert d.steps == 20
    norm = stats["norm.weight"]  # seed 002: bf16 LayerNorm weights still exactly 1.0
    assert (norm.dtype, norm.moved, norm.unchanged, norm.update, norm.steps) == ("torch.bfloat16", 0.0, 1.0, 0.0, 20)
    assert norm.spacing == 2.0 ** -7 and norm.intended is not None and norm.intended < norm.spacing / 2
    a = torch.load(old, weights_only=True)["model"]["fc.weight"].double()
    b = torch.load(new, weights_only=True)["model"]["fc.weight"].double()
    fc = stats["fc.weight"]
    assert fc.update == pytest.approx(float((b - a).norm() / a.norm()), rel=1e-12)
    assert fc.moved == pytest.approx(float((b - a).abs().max()))
    assert fc.unchanged == pytest.approx(float((a == b).double().mean()))
    assert "bn.running_mean" in stats and stats["bn.running_mean"].moved is None  # buffers: norm only
    assert "norm.weight" in {r.name for r in d.rows if r.moved == 0.0}


def test_chunked_statistics_match_whole_tensor(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from safetensors.torch import save_file

    from traindoc.sources.ckpt import _tensors

    g = torch.Generator().manual_seed(1)
    a = torch.randn(37, 29, generator=g).to(torch.bfloat16)
    b = a.clone()
    b[5:9] += 0.25
    b[20, 3] = float("inf")
    torch.save({"t": a}, tmp_path / "a.pt")
    save_file({"t": b}, str(tmp_path / "b.safetensors"))
    monkeypatch.setattr(_tensors, "CHUNK", 50)  # chunks that straddle rows on both sides
    old = open_checkpoint(tmp_path / "a.pt").model
    new = open_checkpoint(tmp_path / "b.safetensors").model
    chunks = list(new.chunks("t", 50))
    assert len(chunks) > 10 and max(c.numel() for c in chunks) <= 50 + 29
    st = _tensors.stats(new, "t")
    assert st.nonfinite == 1 and math.isnan(st.norm)
    ds = _tensors.diff_stats(old, new, "t")
    fin = torch.isfinite(b.double())
    d = torch.where(fin, b.double() - a.double(), torch.zeros(()))
    assert ds.delta_norm == pytest.approx(float(d.norm()), rel=1e-12)
    assert ds.unchanged == pytest.approx(float((a.view(torch.int16) == b.view(torch.int16)).double().mean()))
    assert ds.new_nonfinite == 1 and ds.moved == pytest.approx(float(d.abs().max()))


def test_parameters_without_optimizer_state_are_noted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ckpt_fixtures import Net, train

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.head.bias.requires_grad_(False)  # frozen after the optimizer was built: never a gradient
    train(model, opt, steps=2)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 2}, tmp_path / "x.pt")
    events, summary = produce.inspect(tmp_path / "x.pt")
    assert any("1 of 10 parameters have no optimizer state" in n and "head.bias" in n for n in summary.notes)
    head_bias = next(e for e in events if isinstance(e, ParamStats) and e.name == "head.bias")
    assert head_bias.has_grad is False


def test_non_contiguous_saved_tensor_is_read_in_slabs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = torch.randn(64, 48)
    torch.save({"w": t.t()}, tmp_path / "t.pt")  # a transposed view is saved with its strides
    store = open_checkpoint(tmp_path / "t.pt").model
    chunks = list(store.chunks("w", 100))
    assert len(chunks) > 1 and torch.equal(torch.cat(chunks), t.t().reshape(-1))


def test_diff_of_a_checkpoint_with_itself_judges_no_movement(made: Made) -> None:
    events, d = produce.diff(made.complete, made.complete)
    assert d.steps == 0 and any("same step" in n for n in d.notes)
    assert all(e.moved is None for e in events if isinstance(e, ParamStats))
    assert all(r.moved == 0.0 and r.unchanged == 1.0 for r in d.rows)


def test_diff_steps_from_saved_steps_and_swapped_order(made: Made) -> None:
    old, new = made.ema_frozen  # optimizer counts 5 -> 11, saved steps 100 -> 500
    assert produce.diff(old, new)[1].steps == 6
    events, d = produce.diff(new, old)
    assert d.steps is None and any("did you swap them" in n for n in d.notes)
    assert {e.steps for e in events if isinstance(e, ParamStats)} == {1}
