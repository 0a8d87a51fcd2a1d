"""The live mixed-precision probes, from code: the GradScaler's skipped steps, clipping before
unscale_, autocast coverage, the unscaled loss, fail-open and clean uninstall."""

from __future__ import annotations

import concurrent.futures
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc import record
from traindoc.events import AutocastCheck, Backward, Clip, GradScale, ScaledClip, Scalar
from traindoc.live.probes.amp import AmpProbes

DEV = "cpu"  # CPU autocast/GradScaler stand in for CUDA's (fp16 matmuls: keep models tiny)


def data(n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 8, generator=g)
    return x, (x[:, 0] > 0).long()


def amp_loop(steps: int = 12, *, unscale: bool = True, clip: bool = True, nan_at: tuple[int, ...] = (),
             autocast: bool = True, enabled: bool = True) -> tuple[nn.Module, list[float], list[float], list[bool]]:
    """A tiny AMP loop. Returns the model, the losses, the clip norms (unscaled) and whether each
    step was skipped. ``nan_at``: steps whose gradients get a NaN (the scaler skips them)."""
    torch.manual_seed(0)
    x, y = data()
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler(DEV, enabled=enabled)
    losses, norms, skipped = [], [], []
    for step in range(steps):
        xb, yb = x[step * 16 % 256:][:16], y[step * 16 % 256:][:16]
        with torch.autocast(DEV, dtype=torch.float16, enabled=autocast):
            loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        scaler.scale(loss).backward()
        if step in nan_at:
            model[0].weight.grad[0, 0] = float("nan")
        if unscale:
            scaler.unscale_(opt)
        if clip:
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            norms.append(float(total) / (1.0 if unscale else scaler.get_scale()))
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        skipped.append(scaler.get_scale() < before)
        losses.append(loss.item())
    return model, losses, norms, skipped


def events_of(path: Path, kind: type) -> list:  # type: ignore[type-arg]
    return [e for e in record.read(path) if isinstance(e, kind)]


def test_skipped_steps_still_count_and_the_loss_is_unscaled(tmp_path: Path) -> None:
    rec = tmp_path / "r.jsonl"
    with traindoc.watch(announce=False, record=str(rec)) as doc:
        _, losses, _, skipped = amp_loop(12, nan_at=(2, 3, 7))
    assert skipped == [s in (2, 3, 7) for s in range(12)]
    assert doc.report().run["steps"] == 12
    scales = events_of(rec, GradScale)
    assert [e.step for e in scales] == list(range(12))
    assert [e.skipped for e in scales] == skipped
    assert scales[2].scale == 32768.0 and scales[3].scale == 16384.0
    assert "0.weight" in scales[2].nan and scales[2].optimizer == "AdamW"
    assert "test_live_amp.py" in scales[0].where
    # one loss per iteration (a skipped step is not merged into the next) and unscaled
    loss = {e.step: e.value for e in events_of(rec, Scalar) if e.name == "loss"}
    assert sorted(loss) == list(range(12))
    for step, value in loss.items():
        assert math.isclose(value, losses[step], rel_tol=1e-5), (step, value, losses[step])
    assert all(math.isclose(b.value, losses[b.step], rel_tol=1e-5) for b in events_of(rec, Backward))
    ids = {f.id for f in doc.findings if f.severity != "info"}
    assert "grad-scaler-collapse" not in ids and "loss-spike" not in ids, ids


def test_watching_an_amp_loop_is_bit_identical() -> None:
    bare, bare_losses, _, _ = amp_loop(10, nan_at=(4,))
    with traindoc.watch(announce=False):
        watched, watched_losses, _, _ = amp_loop(10, nan_at=(4,))
    assert bare_losses == watched_losses
    for a, b in zip(bare.state_dict().values(), watched.state_dict().values()):
        assert torch.equal(a, b)


def test_a_collapsing_scale_fires_with_nan_evidence() -> None:
    with traindoc.watch(announce=False) as doc:
        amp_loop(24, nan_at=tuple(range(24)))
    f = next(f for f in doc.findings if f.id == "grad-scaler-collapse")
    assert f.severity == "error" and f.step == 0
    assert f.evidence["skipped"] == 24 and f.evidence["scale"] < 1.0
    assert "0.weight" in f.evidence["nan_gradients"]
    assert "set_detect_anomaly" in f.fix and "AdamW" in f.fix


def test_the_initial_back_off_is_not_a_collapse() -> None:
    with traindoc.watch(announce=False) as doc:
        amp_loop(30, nan_at=(0, 1, 2, 3, 4, 20))
    assert "grad-scaler-collapse" not in {f.id for f in doc.findings}


def test_clip_before_unscale_fires_and_the_clip_norm_is_reported_unscaled(tmp_path: Path) -> None:
    rec = tmp_path / "r.jsonl"
    with traindoc.watch(announce=False, record=str(rec)) as doc:
        _, _, norms, _ = amp_loop(6, unscale=False)
    f = next(f for f in doc.findings if f.id == "clip-before-unscale")
    assert f.step == 0 and f.severity == "error"
    assert f.evidence["calls"] == 6 and f.evidence["scale"] == 65536.0
    assert any("test_live_amp.py" in w for w in f.where)
    assert "scaler.unscale_(optimizer)" in f.fix
    clips = events_of(rec, Clip)
    assert [c.step for c in clips] == list(range(6))
    for c, n in zip(clips, norms):  # the user's units, so clipping-every-step is not misled
        assert math.isclose(c.norm, n, rel_tol=1e-4), (c.norm, n)
    scaled = events_of(rec, ScaledClip)
    assert math.isclose(scaled[0].norm / scaled[0].scale, norms[0], rel_tol=1e-4)
    assert "clipping-every-step" not in {f.id for f in doc.findings}


def test_unscale_then_clip_and_disabled_scalers_are_quiet() -> None:
    with traindoc.watch(announce=False) as doc:
        amp_loop(6, unscale=True)
        amp_loop(6, unscale=False, enabled=False, autocast=False)  # GradScaler(enabled=False)
    assert doc.findings == [] or all(f.id not in ("clip-before-unscale", "grad-scaler-collapse")
                                     for f in doc.findings)


def test_two_optimizers_clip_judges_the_one_holding_the_parameters() -> None:
    def run(unscale_second: bool) -> set[str]:
        torch.manual_seed(0)
        x, y = data(32)
        a, b = nn.Linear(8, 8), nn.Linear(8, 2)
        oa, ob = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(DEV)
        with traindoc.watch(announce=False) as doc:
            for _ in range(3):
                loss = F.cross_entropy(b(a(x)), y)
                oa.zero_grad()
                ob.zero_grad()
                scaler.scale(loss).backward()
                scaler.unscale_(oa)
                torch.nn.utils.clip_grad_norm_(a.parameters(), 1.0)  # fine: oa was unscaled
                if unscale_second:
                    scaler.unscale_(ob)
                torch.nn.utils.clip_grad_norm_(b.parameters(), 1.0)
                scaler.step(oa)
                scaler.step(ob)
                scaler.update()
        return {f.id for f in doc.findings}

    assert "clip-before-unscale" in run(unscale_second=False)
    assert "clip-before-unscale" not in run(unscale_second=True)


def test_autocast_bypassed_when_the_forward_runs_outside_autocast() -> None:
    with traindoc.watch(announce=False) as doc:
        torch.manual_seed(0)
        x, y = data()
        model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
        opt = torch.optim.AdamW(model.parameters())
        scaler = torch.amp.GradScaler(DEV)
        for _ in range(4):
            out = model(x)
            with torch.autocast(DEV, dtype=torch.float16):
                loss = F.cross_entropy(out, y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    f = next(f for f in doc.findings if f.id == "autocast-bypassed")
    assert f.severity == "info" and f.evidence["reason"] == "outside" and f.evidence["share"] == 1.0
    assert f.evidence["fp32_modules"] == ["0", "2"]


def test_autocast_state_does_not_reach_another_thread(tmp_path: Path) -> None:
    rec = tmp_path / "r.jsonl"
    torch.manual_seed(0)
    x, y = data()
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    head = nn.Linear(2, 2)
    opt = torch.optim.AdamW([*model.parameters(), *head.parameters()])
    with traindoc.watch(announce=False, record=str(rec)), concurrent.futures.ThreadPoolExecutor(1) as pool:
        for _ in range(3):
            with torch.autocast(DEV, dtype=torch.bfloat16):
                out = pool.submit(model, x).result()  # a worker thread: autocast is thread-local
                loss = F.cross_entropy(head(out).float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    checks = events_of(rec, AutocastCheck)
    assert checks and checks[0].reason == "thread" and set(checks[0].fp32) == {"0", "2"}
    assert checks[0].autocast == ("cpu:bfloat16",)


def test_healthy_autocast_and_fp32_runs_are_quiet(tmp_path: Path) -> None:
    rec = tmp_path / "r.jsonl"
    with traindoc.watch(announce=False, record=str(rec)) as doc:
        amp_loop(4)
        amp_loop(4, autocast=False, enabled=False)  # plain fp32: not a mixed-precision step
    checks = events_of(rec, AutocastCheck)
    assert len(checks) == 4 and all(c.fp32 == () for c in checks)
    assert "autocast-bypassed" not in {f.id for f in doc.findings}


def test_an_amp_probe_error_is_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: object, scaler: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(AmpProbes, "_after_update", broken)
    bare, bare_losses, _, _ = amp_loop(6)
    with traindoc.watch(announce=False) as doc:
        watched, watched_losses, _, _ = amp_loop(6)
    assert bare_losses == watched_losses
    assert dict(doc.report().disabled)["probe:amp"].startswith("RuntimeError: boom; blind from step ")


def test_amp_probes_are_removed_on_exit() -> None:
    gs = torch.amp.GradScaler
    before = (gs.scale, gs.unscale_, gs.step, gs.update, torch.nn.utils.clip_grad_norm_,
              torch.nn.utils.clip_grad_value_)
    with traindoc.watch(announce=False):
        assert gs.step is not before[2]
    assert (gs.scale, gs.unscale_, gs.step, gs.update, torch.nn.utils.clip_grad_norm_,
            torch.nn.utils.clip_grad_value_) == before


def test_a_fused_optimizer_skip_is_read_from_the_scaler(tmp_path: Path) -> None:
    """Fused AdamW handles the scaler itself: its step() runs (hooks fire) even when skipping."""
    rec = tmp_path / "r.jsonl"
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    scaler = torch.amp.GradScaler(DEV)
    x, y = data(16)
    with traindoc.watch(announce=False, record=str(rec)) as doc:
        for step in range(6):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            if step in (1, 2):
                model.weight.grad[0, 0] = float("nan")
            scaler.step(opt)
            scaler.update()
    assert doc.report().run["steps"] == 6
    assert [(e.step, e.skipped) for e in events_of(rec, GradScale)] == [(s, s in (1, 2)) for s in range(6)]
