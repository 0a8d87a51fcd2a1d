"""The loop probes from code: scheduler order, gradient accumulation, clearing gradients."""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import traindoc
from traindoc.events import GradAccumulation, SchedulerStep
from traindoc.live.probes.accumulation import loss_factor

SCHED = "scheduler-before-optimizer"
UNSCALED = "unscaled-grad-accumulation"
ZERO = "missing-zero-grad"


def ids(doc: traindoc.live.watch.Watch) -> dict[str, object]:
    return {f.id: f for f in doc.report().findings}


def events(doc: traindoc.live.watch.Watch, kind: type) -> list[object]:
    return [e for e in doc.recorded if isinstance(e, kind)]


@contextlib.contextmanager
def watch() -> Iterator[traindoc.live.watch.Watch]:
    """watch() that also keeps the event stream (doc.recorded)."""
    recorded: list[object] = []
    with traindoc.watch(announce=False) as doc:
        doc.session._sink = recorded.append
        doc.recorded = recorded  # type: ignore[attr-defined]
        yield doc


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))


def loader(n: int = 512, batch: int = 16) -> DataLoader:
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g))
    return DataLoader(data, batch_size=batch, shuffle=True, generator=g)


# ---- loss_factor ---------------------------------------------------------------------------------
@pytest.mark.parametrize("make,expected", [
    (lambda l: l, 1.0),
    (lambda l: l / 4, 0.25),
    (lambda l: l * 0.5, 0.5),
    (lambda l: 0.5 * l, 0.5),
    (lambda l: (l / 4) * 2.0, 0.5),
    (lambda l: l / torch.tensor(8.0), 0.125),
    (lambda l: l + l, 1.0),
    (lambda l: l * l, 1.0),
])
def test_loss_factor_reads_constant_scaling_from_the_graph(make: object, expected: float) -> None:
    x = torch.randn(4, 3, requires_grad=True)
    assert loss_factor(make((x ** 2).mean())) == pytest.approx(expected)  # type: ignore[operator]


# ---- scheduler order -----------------------------------------------------------------------------
def onecycle_run(*, prestep: bool, reset: bool = False, steps: int = 6) -> tuple[nn.Module, list[float]]:
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.8, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.8, total_steps=60, pct_start=8 / 60)
    if prestep:
        sched.step()
        if reset:
            for g in opt.param_groups:
                g["lr"] = 0.8 / 25
    lrs = []
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return model, lrs


def test_prestepped_onecycle_fires_with_both_lrs() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with watch() as doc:
            _, lrs = onecycle_run(prestep=True)
    f = ids(doc)[SCHED]
    assert f.step == 0
    assert f.evidence["intended_first_lr"] == pytest.approx(0.032)
    assert f.evidence["first_step_lr"] == pytest.approx(lrs[0])
    assert 1.5 < f.evidence["ratio"] < 2.5  # seed 004: 0.061 instead of 0.032
    assert "0.032" in f.message and f.where and "test_loop.py:" in f.where[0]
    (ev,) = events(doc, SchedulerStep)
    assert (ev.scheduler, ev.optimizer, ev.early, ev.skipped) == ("OneCycleLR", "SGD", 1, 0)


def test_prestep_with_lr_reset_by_hand_still_fires() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with watch() as doc:
            onecycle_run(prestep=True, reset=True)
    f = ids(doc)[SCHED]
    assert "set back by hand" in f.message


def test_step_lr_stepped_first_fires_without_claiming_a_reset() -> None:
    """StepLR stays at its first value for step_size epochs: the early call changes no LR yet,
    nobody set it back, and every later drop still comes one epoch early."""
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with watch() as doc:
            for _ in range(6):
                sched.step()
                opt.zero_grad()
                model(torch.randn(8, 4)).pow(2).mean().backward()
                opt.step()
    f = ids(doc)[SCHED]
    assert "set back by hand" not in f.message and "does not change there yet" in f.message
    assert f.evidence["first_step_lr"] == f.evidence["intended_first_lr"] == pytest.approx(0.1)


def test_correct_order_is_quiet_and_reported_once() -> None:
    with watch() as doc:
        onecycle_run(prestep=False)
    assert SCHED not in ids(doc)
    (ev,) = events(doc, SchedulerStep)
    assert ev.early == 0


def test_pytorch_warning_still_points_at_the_users_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with watch():
            onecycle_run(prestep=True)
    order = [w for w in caught if "lr_scheduler.step()" in str(w.message)]
    assert order and order[0].filename == __file__


def test_gradscaler_skipped_first_steps_is_not_the_users_order() -> None:
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=20)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24)
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with watch() as doc:
            for _ in range(10):
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                sched.step()
    (ev,) = events(doc, SchedulerStep)
    assert ev.early >= 1 and ev.skipped == ev.early
    assert SCHED not in ids(doc)


def test_reduce_lr_on_plateau_before_training_is_not_watched() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    with watch() as doc:
        plateau.step(1.0)  # an initial validation loss
        for _ in range(3):
            F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 3, (8,))).backward()
            opt.step()
            opt.zero_grad()
    assert events(doc, SchedulerStep) == [] and SCHED not in ids(doc)


def test_sequential_lr_in_order_is_quiet() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=3)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[3])
    with watch() as doc:
        for _ in range(6):
            F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 3, (8,))).backward()
            opt.step()
            opt.zero_grad()
            sched.step()
    assert SCHED not in ids(doc)
    assert all(e.early == 0 for e in events(doc, SchedulerStep))


# ---- gradient accumulation -----------------------------------------------------------------------
def accumulate(*, divide: bool, accum: int = 4, steps: int = 8, zero: str = "optimizer") -> nn.Module:
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    done, micro = 0, 0
    for x, y in loader():
        loss = F.cross_entropy(model(x), y)
        if divide:
            loss = loss / accum
        loss.backward()
        micro += 1
        if micro % accum == 0:
            opt.step()
            if zero == "optimizer":
                opt.zero_grad()
            elif zero == "none":
                for p in model.parameters():
                    p.grad = None
            elif zero == "zero_":
                for p in model.parameters():
                    p.grad.zero_()
            done += 1
            if done == steps:
                break
    return model


def test_undivided_accumulation_fires_with_micro_batches_and_growth() -> None:
    with watch() as doc:
        accumulate(divide=False)
    f = ids(doc)[UNSCALED]
    assert f.step == 0
    assert f.evidence["micro_batches"] == 4 and f.evidence["loss_scale"] == 1.0
    norms = f.evidence["norms_per_micro_batch"]
    assert len(norms) == 4 and f.evidence["growth_vs_single"] == pytest.approx(norms[-1] / norms[0])
    assert f.evidence["growth_vs_single"] > 1.5
    assert "loss = loss / 4" in f.fix and "SGD" in f.message
    acc = events(doc, GradAccumulation)
    assert acc[0].backwards == 4 and acc[0].batches == 4 and acc[0].cleared


def test_divided_accumulation_is_quiet() -> None:
    with watch() as doc:
        accumulate(divide=True)
    assert UNSCALED not in ids(doc) and ZERO not in ids(doc)
    assert events(doc, GradAccumulation)[0].scale == pytest.approx(0.25)


@pytest.mark.parametrize("zero", ["none", "zero_"])
def test_manual_clearing_counts_as_cleared(zero: str) -> None:
    with watch() as doc:
        accumulate(divide=True, zero=zero)
    assert ZERO not in ids(doc)


def test_accumulation_leaves_training_bit_identical() -> None:
    bare = accumulate(divide=False)
    with watch():
        watched = accumulate(divide=False)
    for a, b in zip(bare.state_dict().values(), watched.state_dict().values()):
        assert torch.equal(a, b)


def test_two_backward_calls_on_one_batch_are_not_accumulation() -> None:
    """A two-term loss backpropagated term by term: one batch, two backward() calls, summed."""
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with watch() as doc:
        for i, (x, y) in enumerate(loader()):
            out = model(x)
            F.cross_entropy(out, y).backward(retain_graph=True)
            (0.1 * out.pow(2).mean()).backward()
            opt.step()
            opt.zero_grad()
            if i == 10:
                break
    assert UNSCALED not in ids(doc)


def test_gan_style_alternation_is_not_accumulation_or_missing_zero_grad() -> None:
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 8)), nn.Sequential(nn.Linear(8, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    ones, zeros = torch.ones(16, 1), torch.zeros(16, 1)
    with watch() as doc:
        for i, (x, _) in enumerate(loader()):
            disc.zero_grad()
            F.binary_cross_entropy_with_logits(disc(x), ones).backward()
            fake = gen(torch.randn(16, 4))
            F.binary_cross_entropy_with_logits(disc(fake.detach()), zeros).backward()
            opt_d.step()
            gen.zero_grad()
            F.binary_cross_entropy_with_logits(disc(fake), ones).backward()
            opt_g.step()
            if i == 20:
                break
    found = ids(doc)
    assert UNSCALED not in found and ZERO not in found


# ---- missing zero_grad ---------------------------------------------------------------------------
def no_clear(steps: int = 10) -> nn.Module:
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for i, (x, y) in enumerate(loader()):
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if i + 1 == steps:
            break
    return model


def test_missing_zero_grad_fires_from_step_1_with_growing_norms() -> None:
    with watch() as doc:
        no_clear()
    f = ids(doc)[ZERO]
    assert f.severity == "error" and f.step == 1
    norms = f.evidence["grad_norm_at_steps"]
    assert len(norms) >= 3 and norms[-1] > norms[0]
    assert f.evidence["carried_norm"] > 0 and "Adam" in f.message
    assert UNSCALED not in ids(doc)  # one backward per step: not accumulation


def test_zero_grad_set_to_none_false_counts_as_cleared() -> None:
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with watch() as doc:
        for i, (x, y) in enumerate(loader()):
            opt.zero_grad(set_to_none=False)
            F.cross_entropy(model(x), y).backward()
            opt.step()
            if i == 8:
                break
    assert ZERO not in ids(doc)
    assert all(e.cleared for e in events(doc, GradAccumulation))
