"""Clipping done without ``clip_grad_norm_`` is seen once per clipping, as ``clip_grad_norm_``
is: torchtitan's ``get_total_norm`` + ``clip_grads_with_norm_``, a norm shared by several
parameter groups, Accelerate's ``clip_grad_norm_``, FSDP2 (DTensor) parameters, FSDP1's own
``clip_grad_norm_``, and the same path before ``scaler.unscale_`` (clip-before-unscale)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Iterator

import pytest
import torch
import torch.nn as nn

import traindoc
from conftest import python
from traindoc.events import Clip, ScaledClip


@contextlib.contextmanager
def watch() -> Iterator[tuple[traindoc.live.watch.Watch, list[object]]]:
    recorded: list[object] = []
    with traindoc.watch(announce=False) as doc:
        doc.session._sink = recorded.append
        yield doc, recorded


def clips(recorded: list[object], kind: type = Clip) -> list[object]:
    return [e for e in recorded if isinstance(e, kind)]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))


def batches(n: int, scale: float = 1.0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    for _ in range(n):
        yield torch.randn(16, 8, generator=g), scale * torch.randn(16, 1, generator=g)


def test_two_call_clipping_is_one_clip_with_the_pre_clip_norm() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    norms = []
    with watch() as (doc, recorded):
        for x, y in batches(6, scale=50.0):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            total = torch.nn.utils.get_total_norm(grads, 2.0)
            norms.append(float(total))
            torch.nn.utils.clip_grads_with_norm_(list(model.parameters()), 0.5, total)
            opt.step()
    seen = clips(recorded)
    assert [c.step for c in seen] == list(range(6))
    assert [c.max_norm for c in seen] == [0.5] * 6
    assert [c.norm for c in seen] == pytest.approx(norms, rel=1e-6)
    assert all(n > 0.5 for n in norms)  # it really clipped


def test_clip_grad_norm_is_counted_once_on_this_torch() -> None:
    """torch's clip_grad_norm_ may compute through get_total_norm/clip_grads_with_norm_: one
    clip each, not two."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with watch() as (doc, recorded):
        for x, y in batches(5, scale=50.0):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
    assert [c.step for c in clips(recorded)] == list(range(5))


def test_one_norm_for_several_groups_is_one_clip_two_norms_are_two() -> None:
    """torchtitan's expert-parallel path clips two groups with one total norm (one clipping);
    a GAN clips its two networks with two norms (two clippings)."""
    a, b = mlp(), mlp()
    opt = torch.optim.SGD([*a.parameters(), *b.parameters()], lr=1e-3)
    with watch() as (doc, recorded):
        for x, y in batches(4, scale=50.0):
            opt.zero_grad()
            ((a(x) + b(x) - y) ** 2).mean().backward()
            pa, pb = list(a.parameters()), list(b.parameters())
            total = torch.nn.utils.get_total_norm([p.grad for p in pa + pb])
            torch.nn.utils.clip_grads_with_norm_(pa, 1.0, total)
            torch.nn.utils.clip_grads_with_norm_(pb, 1.0, total)
            opt.step()
        shared = len(clips(recorded))
        for x, y in batches(4, scale=50.0):
            opt.zero_grad()
            ((a(x) + b(x) - y) ** 2).mean().backward()
            for group in (list(a.parameters()), list(b.parameters())):
                torch.nn.utils.clip_grads_with_norm_(group, 1.0, torch.nn.utils.get_total_norm([p.grad for p in group]))
            opt.step()
    steps = [c.step for c in clips(recorded)]
    assert steps == [0, 1, 2, 3, 4, 4, 5, 5, 6, 6, 7, 7]


def test_clipping_every_step_fires_on_the_two_call_path_and_not_when_healthy() -> None:
    def run(target_scale: float, max_norm: float) -> set[str]:
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)
        with watch() as (doc, _):
            for x, y in batches(40, scale=target_scale):
                opt.zero_grad()
                ((model(x) - y) ** 2).mean().backward()
                params = list(model.parameters())
                total = torch.nn.utils.get_total_norm([p.grad for p in params])
                torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
                opt.step()
        return {f.id for f in doc.report().findings}

    assert "clipping-every-step" in run(100.0, 1.0)
    assert "clipping-every-step" not in run(1.0, 100.0)


def test_clip_before_unscale_on_the_two_call_path() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    norms = []
    with watch() as (doc, recorded):
        for x, y in batches(3):
            opt.zero_grad()
            scaler.scale(((model(x) - y) ** 2).mean()).backward()
            params = list(model.parameters())
            total = torch.nn.utils.get_total_norm([p.grad for p in params])
            norms.append(float(total))
            torch.nn.utils.clip_grads_with_norm_(params, 1.0, total)  # before unscale_: the bug
            scaler.step(opt)
            scaler.update()
    scaled = clips(recorded, ScaledClip)
    assert [s.fn for s in scaled] == ["clip_grads_with_norm_"] * 3
    assert [s.norm for s in scaled] == pytest.approx(norms, rel=1e-6)
    # the Clip event is in the user's units: the scaled norm divided by the scale
    assert [c.norm for c in clips(recorded)] == pytest.approx([n / 1024.0 for n in norms], rel=1e-5)
    assert "clip-before-unscale" in {f.id for f in doc.report().findings}


# Taken when this module was imported, before any watch started (a training module's
# ``from torch.nn.utils import ...`` at its top, imported before ``traindoc.watch()``).
EARLY_CLIP_WITH_NORM = torch.nn.utils.clip_grads_with_norm_
EARLY_CLIP_VALUE = torch.nn.utils.clip_grad_value_


def test_clipping_functions_stay_torchs_own_and_every_reference_is_seen() -> None:
    """Nothing of torch's clipping is replaced: the names keep torch's function objects, and a
    reference taken before traindoc started, or a wrapper of the user's put on a name while
    watching, still clips once and is counted once (a replaced public name missed the first:
    it held torch's function, not the replacement)."""
    names = ("clip_grad_norm_", "clip_grads_with_norm_", "clip_grad_value_")
    before = {n: getattr(torch.nn.utils, n) for n in names}
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mine: list[float] = []
    with watch() as (doc, recorded):
        assert {n: getattr(torch.nn.utils, n) for n in names} == before
        for i, (x, y) in enumerate(batches(4, scale=50.0)):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            if i == 2:  # the user's own wrapper, put on the public name mid-run
                def logged(params: object, max_norm: float, total: torch.Tensor, **kw: object) -> None:
                    mine.append(float(total))
                    before["clip_grads_with_norm_"](params, max_norm, total, **kw)
                torch.nn.utils.clip_grads_with_norm_ = logged  # type: ignore[assignment]
                clip = torch.nn.utils.clip_grads_with_norm_
            else:
                clip = EARLY_CLIP_WITH_NORM
            total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            clip(list(model.parameters()), 0.5, total)
            EARLY_CLIP_VALUE(model.parameters(), 10.0)  # value clipping: no norm, no Clip
            opt.step()
    assert torch.nn.utils.clip_grads_with_norm_ is logged  # the user's patch stays
    torch.nn.utils.clip_grads_with_norm_ = before["clip_grads_with_norm_"]
    assert {n: getattr(torch.nn.utils, n) for n in names} == before
    assert len(mine) == 1
    assert [(c.step, c.via) for c in clips(recorded)] == [(i, "clip_grads_with_norm_") for i in range(4)]


def test_a_torch_without_closure_wrappers_gets_its_names_wrapped_and_put_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a torch's clipping functions are not ``_no_grad_wrapper`` closures, the module
    attributes are wrapped instead: clips are still counted once, and the names come back."""
    from traindoc.live.probes import _clip

    monkeypatch.setattr(_clip, "_func_cell", lambda outer: None)
    names = ("clip_grad_norm_", "clip_grads_with_norm_", "clip_grad_value_")
    before = {n: getattr(torch.nn.utils, n) for n in names}
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with watch() as (doc, recorded):
        assert torch.nn.utils.clip_grads_with_norm_ is not before["clip_grads_with_norm_"]
        for x, y in batches(3, scale=50.0):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
    assert {n: getattr(torch.nn.utils, n) for n in names} == before
    assert [(c.step, c.via) for c in clips(recorded)] == [(i, "clip_grad_norm_") for i in range(3)]


def test_value_clipping_before_unscale_is_a_scaled_clip() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with watch() as (doc, recorded):
        for x, y in batches(3):
            opt.zero_grad()
            scaler.scale(((model(x) - y) ** 2).mean()).backward()
            torch.nn.utils.clip_grad_value_((p for p in model.parameters()), 1.0)  # a generator
            scaler.step(opt)
            scaler.update()
    scaled = clips(recorded, ScaledClip)
    assert [(s.fn, s.max_norm, s.norm) for s in scaled] == [("clip_grad_value_", 1.0, None)] * 3
    assert clips(recorded) == []


def test_accelerate_clip_grad_norm_is_seen() -> None:
    accelerate = pytest.importorskip("accelerate")
    accelerator = accelerate.Accelerator(cpu=True)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    model, opt = accelerator.prepare(model, opt)
    norms = []
    with watch() as (doc, recorded):
        for x, y in batches(4, scale=50.0):
            opt.zero_grad()
            accelerator.backward(((model(x) - y) ** 2).mean())
            norms.append(float(accelerator.clip_grad_norm_(model.parameters(), 0.5)))
            opt.step()
    seen = clips(recorded)
    assert [c.step for c in seen] == list(range(4))
    assert [c.norm for c in seen] == pytest.approx(norms, rel=1e-6)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("two_calls", [False, True], ids=["clip_grad_norm_", "torchtitan"])
def test_fsdp2_dtensor_clipping_is_seen(two_calls: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """fully_shard on one gloo process: the parameters and gradients are DTensors."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        model = mlp()
        fully_shard(model)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        norms = []
        with watch() as (doc, recorded):
            for x, y in batches(4, scale=50.0):
                opt.zero_grad()
                ((model(x) - y) ** 2).mean().backward()
                params = list(model.parameters())
                assert isinstance(params[0].grad, DTensor)
                if two_calls:  # torchtitan's dist utils: reduce the norm, then clip with it
                    total = torch.nn.utils.get_total_norm([p.grad for p in params])
                    total = total.full_tensor() if isinstance(total, DTensor) else total
                    torch.nn.utils.clip_grads_with_norm_(params, 0.5, total)
                else:
                    total = torch.nn.utils.clip_grad_norm_(params, 0.5)
                    total = total.full_tensor() if isinstance(total, DTensor) else total
                norms.append(float(total))
                opt.step()
        seen = clips(recorded)
        assert [c.step for c in seen] == list(range(4))
        assert [c.norm for c in seen] == pytest.approx(norms, rel=1e-6)
    finally:
        dist.destroy_process_group()
        os.environ.pop("MASTER_PORT", None)


def test_accelerate_with_a_sharded_and_a_plain_part_is_one_clip_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accelerate's clip_grad_norm_ on parameters of a device mesh and plain ones: one norm,
    clip_grads_with_norm_ once per group (the mesh's through DTensor.from_local)."""
    accelerate = pytest.importorskip("accelerate")
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        accelerator = accelerate.Accelerator(cpu=True)
        model = mlp()
        fully_shard(model[0])  # DTensor parameters; model[2] stays plain
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        calls = []
        orig = torch.nn.utils.clip_grads_with_norm_
        monkeypatch.setattr(torch.nn.utils, "clip_grads_with_norm_",
                            lambda *a, **k: calls.append(1) or orig(*a, **k))
        norms = []
        with watch() as (doc, recorded):
            for x, y in batches(3, scale=50.0):
                opt.zero_grad()
                accelerator.backward(((model(x) - y) ** 2).mean())
                norms.append(float(accelerator.clip_grad_norm_(list(model.parameters()), 0.5)))
                opt.step()
        assert len(calls) == 6  # two groups a step
        seen = clips(recorded)
        assert [c.step for c in seen] == [0, 1, 2]
        assert [c.norm for c in seen] == pytest.approx(norms, rel=1e-6)
    finally:
        dist.destroy_process_group()


FSDP1 = """
import json, os, sys
import torch, torch.nn as nn, torch.distributed as dist, torch.multiprocessing as mp


def worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    import traindoc
    from traindoc.events import Clip

    torch.manual_seed(0)
    recorded, norms = [], []
    with traindoc.watch(announce=False) as doc:
        doc.session._sink = recorded.append
        model = FSDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)), device_id=torch.device("cpu"))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for _ in range(4):
            x, y = torch.randn(16, 8), 50 * torch.randn(16, 1)
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            norms.append(float(model.clip_grad_norm_(0.5)))
            opt.step()
    if rank == 0:
        clips = [[c.step, c.norm, c.max_norm] for c in recorded if isinstance(c, Clip)]
        json.dump({"clips": clips, "norms": norms, "failed": doc.session.failed}, open(out, "w"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world, out = int(sys.argv[1]), sys.argv[2]
    mp.spawn(worker, args=(world, int(sys.argv[3]), out), nprocs=world)
"""


@pytest.mark.parametrize("world", [2, 1], ids=["sharded", "one-rank-no-shard"])
def test_fsdp1_clip_grad_norm_is_seen_once(world: int, tmp_path: Path) -> None:
    """FSDP1's own clip_grad_norm_: sharded (2 gloo ranks) it computes the norm itself; on one
    rank FSDP falls back to NO_SHARD and calls torch's clip_grad_norm_ (not counted twice)."""
    (tmp_path / "fsdp1.py").write_text(FSDP1)
    out = tmp_path / "out.json"
    ran = python(str(tmp_path / "fsdp1.py"), str(world), str(out), str(_free_port()), timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["failed"] == {}
    assert [c[0] for c in data["clips"]] == list(range(4)) and {c[2] for c in data["clips"]} == {0.5}
    assert [c[1] for c in data["clips"]] == pytest.approx(data["norms"], rel=1e-6)
