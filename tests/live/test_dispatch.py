"""The hot path's dispatch (probes/_patch.py): one wrapper of ``torch.autograd.backward`` and one
pair of optimizer step hooks for all probes; callbacks for sampled steps only; probes that drop
out or listen to round ends only while they have work. Each must call exactly what it should,
contain a raising callback, and leave torch as it found it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import optimizer as _optim

from traindoc.live.probes import Probes
from traindoc.live.probes._patch import Patcher
from traindoc.live.session import Session


def _loop(steps: int) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def _watched_loop(session: Session, steps: int) -> Probes:
    """``_loop(steps)`` with every probe installed on ``session``; the probes, uninstalled."""
    probes = Probes(session)
    probes.install()
    try:
        _loop(steps)
    finally:
        probes.uninstall()
    return probes


def test_sampled_only_callbacks_run_on_sampled_steps_and_every_step_ones_always() -> None:
    session = Session(level="standard")  # steps 0-15 sampled, then every 25th
    session.start("test", [])
    patcher = Patcher(session)
    every: list[int] = []
    sampled: list[int] = []
    patcher.on_backward("core", before=session.on_backward)
    patcher.on_backward("every", before=lambda loss: every.append(session.clock.step))
    patcher.on_backward("sampled", before=lambda loss: sampled.append(session.clock.step), sampled_only=True)
    patcher.on_step("optimizer", pre=session.on_step_pre, post=session.on_step_post)
    try:
        _loop(60)
    finally:
        patcher.restore()
    # "every" and "sampled" run before the core callback closes the round: the step is the
    # previous one there, and the backward belongs to the next.
    assert [s + 1 for s in every[1:]] == list(range(1, 60))
    assert [s + 1 for s in sampled[1:]] == [*range(1, 16), 25, 50]


def test_a_raising_step_callback_is_disabled_once_and_the_others_go_on(capsys: Any) -> None:
    session = Session(level="standard")
    session.start("test", [])
    patcher = Patcher(session)
    posts: list[int] = []

    def broken(opt: Any) -> None:
        raise RuntimeError("boom")

    hooks = len(_optim._global_optimizer_pre_hooks), len(_optim._global_optimizer_post_hooks)
    patcher.on_step("first", post=broken)
    patcher.on_step("second", post=lambda opt: posts.append(1))
    try:
        _loop(5)
    finally:
        patcher.restore()
    assert len(posts) == 5 and "first" in session.failed
    assert capsys.readouterr().err.count("internal error in probe 'first'") == 1
    assert (len(_optim._global_optimizer_pre_hooks), len(_optim._global_optimizer_post_hooks)) == hooks


@pytest.mark.parametrize("where", ["backward", "step_pre", "clip"])
def test_a_raising_callback_on_the_hot_path_is_disabled_once(where: str, capsys: Any) -> None:
    """The dispatchers call the per-step callbacks in loops written out in place (not through
    call_each): each still contains a raising callback (disabled once, reported once), as the
    clip dispatcher's guard does, and leaves the training as it was."""
    def trained(session: Session | None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
        probes = Probes(session) if session is not None else None
        if probes is not None:
            probes.install()
        try:
            for _ in range(5):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
                opt.step()
        finally:
            if probes is not None:
                probes.uninstall()
        return [p.detach().clone() for p in model.parameters()]

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom")

    session = Session(level="standard")
    session.start("test", [])
    probe = {"backward": "backward", "step_pre": "optimizer", "clip": "clipping"}[where]
    setattr(session, {"backward": "on_backward", "step_pre": "on_step_pre", "clip": "on_clip"}[where], broken)
    observed = trained(session)
    assert all(torch.equal(a, b) for a, b in zip(observed, trained(None)))
    assert list(session.failed) == [probe]
    err = capsys.readouterr().err
    assert err.count(f"internal error in probe {probe!r}") == 1 and "boom" in err


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_the_backward_knows_whether_its_graph_is_kept() -> None:
    """retain_graph as torch reads it (default: create_graph), from Tensor.backward's positional
    call and from torch.autograd.backward's keywords."""
    session = Session(level="standard")
    session.start("test", [])
    patcher = Patcher(session)
    seen: list[bool] = []
    patcher.on_backward("probe", before=lambda loss: seen.append(patcher.retain_graph))
    x = torch.ones(2, requires_grad=True)
    try:
        (x * x).sum().backward()
        (x * x).sum().backward(retain_graph=True)
        (x * x).sum().backward(create_graph=True)
        (x * x).sum().backward(retain_graph=False, create_graph=True)
        torch.autograd.backward((x * x).sum())
        torch.autograd.backward((x * x).sum(), retain_graph=True)
        torch.autograd.backward((x * x).sum(), create_graph=True)
    finally:
        patcher.restore()
        x.grad = None
    assert seen == [False, True, True, False, False, True, True]


def test_dropped_and_repeated_backward_callbacks() -> None:
    session = Session(level="thorough")
    session.start("test", [])
    patcher = Patcher(session)
    calls: list[str] = []

    def once(loss: Any) -> None:
        calls.append("once")
        patcher.drop_backward("once")

    def twice_registered(loss: Any) -> None:
        calls.append("dup")

    original = torch.autograd.backward
    patcher.on_backward("once", before=once)
    patcher.on_backward("dup", before=twice_registered)
    patcher.on_backward("dup", before=twice_registered)  # the same callback again: kept once
    patcher.drop_backward("gone")  # nothing registered under it: no change
    try:
        _loop(3)
        assert calls == ["dup", "once", "dup", "dup"]  # registered later, called first
        patcher.drop_backward("dup")  # nothing left: the patch stays, calls nothing
        patcher.on_backward("dup", before=twice_registered)  # again: no second patch
        _loop(1)
        assert calls[-1] == "dup" and len(calls) == 5
    finally:
        patcher.restore()
    assert torch.autograd.backward is original


def test_round_listeners_added_and_removed_while_rounds_end() -> None:
    session = Session(level="standard")
    session.start("test", [])
    seen: list[tuple[str, int]] = []

    def one_shot(step: int) -> None:
        seen.append(("one_shot", step))
        session.clock.unlisten_round(one_shot)  # while the listeners are being called

    def always(step: int) -> None:
        seen.append(("always", step))

    session.clock.listen_round(one_shot)
    session.clock.listen_round(one_shot)  # once, however often asked
    session.clock.round_listeners.append(always)
    _watched_loop(session, 3)
    # the listener after the one that removed itself still ran in that round
    assert seen == [("one_shot", 0), ("always", 0), ("always", 1)]


def test_idle_probes_are_not_called_on_an_unsampled_step() -> None:
    """On a plain torch.optim loop, the hand-written-update probe drops out at the first step
    and the evaluation-metrics and data probes listen to no round: an unsampled step's backward
    calls the session only (the accumulation probe reads the patcher's count of backward
    calls)."""
    session = Session(level="standard")
    session.start("test", [])
    probes = Probes(session)
    probes.install()
    try:
        _loop(30)
        before_every_step = probes.patcher.backward_probes(sampled=False)
        names = [getattr(fn, "__qualname__", "") for fn in session.clock.round_listeners]
    finally:
        probes.uninstall()
    assert before_every_step == ["backward"]
    assert not any("EvalMetrics" in n or "DataProbes" in n or "EvalProbes" in n for n in names)


def test_no_class_of_torch_is_modified_from_step_to_step() -> None:
    """Probes patch torch's classes once, at install, never per step: CPython 3.13 stops
    caching attribute lookups on a class modified 1000 times, which would slow every tensor
    method call of a long run (a version tag changes with every modification)."""
    _testcapi = pytest.importorskip("_testcapi")
    if not hasattr(_testcapi, "type_get_version"):
        pytest.skip("CPython 3.11+ exposes a class's version tag (_testcapi.type_get_version)")
    classes = (torch.Tensor, nn.Module, torch.no_grad, torch.inference_mode, torch.optim.Optimizer,
               torch.optim.SGD)
    session = Session(level="standard")  # sampled steps 0-15, 25, 50: hooks go on and off
    session.start("test", [])
    probes = Probes(session)
    probes.install()
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
        versions: list[tuple[int, ...]] = []
        for step in range(60):
            per_sample = F.cross_entropy(model(x), y, reduction="none")
            loss = per_sample.masked_fill(~torch.isfinite(per_sample), 0).mean()
            opt.zero_grad()
            loss.backward()
            with torch.no_grad():
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step >= 2:
                versions.append(tuple(_testcapi.type_get_version(c) for c in classes))
    finally:
        probes.uninstall()
    assert len(set(versions)) == 1, "a class of torch was modified during training"


def _spied_session() -> tuple[Session, list[int]]:
    """A session at ``standard`` (steps 0-15 sampled, then every 25th) and the steps whose
    ``on_step_pre`` ran, as they are called."""
    session = Session(level="standard")
    session.start("test", [])
    pre_steps: list[int] = []
    on_step_pre = session.on_step_pre

    def spy(opt: Any, closure: bool = False) -> None:
        pre_steps.append(session.clock.current_step)
        on_step_pre(opt, closure)

    session.on_step_pre = spy  # type: ignore[method-assign]
    return session, pre_steps


def test_an_unsampled_step_calls_nothing_before_its_update() -> None:
    """The step pre hook is registered for the steps that measure before their update (a
    sampled round, and the one after it, whose round the backward closes) and until the first
    step took effect; an unsampled step calls only the post hook."""
    session, pre_steps = _spied_session()
    _watched_loop(session, 60)
    assert pre_steps == [*range(17), 25, 26, 50, 51]
    assert session.clock.backwards == 60


@pytest.mark.parametrize("change", ["steps_twice", "new_optimizer"])
def test_an_unsampled_step_ends_its_rounds_as_a_sampled_one(change: str) -> None:
    """Closing the round of an optimizer that steps again with no backward between, and
    meeting a new optimizer, are the post hook's work where the pre hook is off: the stream
    of round ends is the one of a run that samples (and pre-hooks) every step."""
    def run(level: str) -> list[tuple[str, int, Any, Any]]:
        events: list[Any] = []
        session = Session(level=level, sink=events.append)
        session.start("test", [])
        probes = Probes(session)
        probes.install()
        try:
            torch.manual_seed(0)
            model = nn.Linear(4, 2)
            opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
            for step in range(30):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if step == 20 and change == "steps_twice":
                    opt.step()  # again, on the same gradients
                if step == 20 and change == "new_optimizer":
                    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        finally:
            probes.uninstall()
        session.finish()
        return [(type(e).__name__, e.step, getattr(e, "optimizer", None), getattr(e, "outcome", None))
                for e in events if type(e).__name__ in ("StepEnd", "Phase")]

    standard, thorough = run("standard"), run("thorough")
    assert standard == thorough
    ends = [e for e in standard if e[0] == "StepEnd"]
    if change == "steps_twice":  # the second step is a round of its own: 31 rounds
        assert len(ends) == 31 and ends[21] == ("StepEnd", 21, 0, "stepped")
    else:  # Adam is optimizer 1 from step 21 on, after a phase boundary
        assert ("Phase", 21, None, None) in standard
        assert ends[20][2] == 0 and ends[21][2] == 1


def test_a_sampled_step_after_a_scaler_skipped_one_is_measured_before_its_update() -> None:
    """A GradScaler that skips a step calls no step hook: the pre hook still goes on for the
    sampled step that follows (its parameters are snapshotted before the update)."""
    session, pre_steps = _spied_session()
    probes = Probes(session)
    probes.install()
    try:
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
        for step in range(30):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            if step == 24:  # an overflow: the scaler skips this step
                grad = model.weight.grad
                assert grad is not None
                with torch.no_grad():
                    grad[0, 0] = float("inf")
            scaler.step(opt)
            scaler.update()
    finally:
        probes.uninstall()
    assert 25 in pre_steps and 24 not in pre_steps
