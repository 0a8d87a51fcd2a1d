"""The time inside torch.distributed's collectives, measured without replacing them where Python
allows it (sys.monitoring, 3.12+), and counted once when one collective runs inside another
(torch hands a collective to a TorchFunctionMode, which calls it again)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

from traindoc.live.collectives import Collectives

ALL_REDUCE = dist.all_reduce  # torch's, the function torch hands a mode


class PassThrough(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class SlowAllReduce(TorchFunctionMode):
    """Every all-reduce takes at least 20 ms more (as one waiting for a slower rank)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is ALL_REDUCE:
            time.sleep(0.02)
        return func(*args, **(kwargs or {}))


@pytest.fixture
def patcher() -> Iterator[Any]:
    from traindoc.live.probes._patch import Patcher
    from traindoc.live.session import Session

    session = Session(level="standard")
    session.start("test", [])
    p = Patcher(session)
    try:
        yield p
    finally:
        p.restore()


@pytest.fixture
def group() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_the_time_inside_collectives_is_counted_once(group: None, patcher: Any) -> None:
    original = dist.all_reduce
    c = Collectives(SimpleNamespace())
    c.install(patcher)
    try:
        if sys.version_info >= (3, 12):
            assert dist.all_reduce is original  # seen through sys.monitoring, not a wrapper
        t = torch.ones(4)
        t0 = time.perf_counter()
        with SlowAllReduce(), PassThrough():  # all_reduce runs three times, nested
            for _ in range(3):
                dist.all_reduce(t)
        wall = time.perf_counter() - t0
        assert 0.06 <= c.spent <= wall  # the sleeps are inside; nothing counted twice
        spent = c.spent
        torch.add(t, 1)  # not a collective
        assert c.spent == spent
    finally:
        c.uninstall()
        patcher.restore()
    assert dist.all_reduce is original


def test_a_collective_that_raises_leaves_the_clock_running_until_the_next_step(group: None, patcher: Any) -> None:
    c = Collectives(SimpleNamespace())
    c.install(patcher)
    try:
        with pytest.raises(Exception):
            dist.all_reduce(torch.ones(2), op="not an op")  # type: ignore[arg-type]
        c.between()  # ranks.py, at the end of an optimizer step
        spent = c.spent
        time.sleep(0.02)
        dist.all_reduce(torch.ones(2))
        assert c.spent - spent < 0.02  # the sleep outside any collective is not in it
    finally:
        c.uninstall()


def test_the_window_after_backward_is_seen_by_the_collectives_only() -> None:
    """From a sampled step's backward to its optimizer step the mode is up for the collectives'
    listener alone: the user's ``torch.nan_to_num`` of a gradient there is nobody else's signal."""
    from traindoc.live.probes._ops import OpsWatch

    calls: list[str] = []
    ops = OpsWatch(SimpleNamespace(compiled=False), lambda probe, fn, *a: fn(*a))  # type: ignore[arg-type]
    ops.listen("masking", [torch.nan_to_num], lambda *a: calls.append("masking"))
    ops.listen("collectives", [torch.nan_to_num], lambda *a: calls.append("collectives"), own="collectives")
    ops.hold("collectives", now=True)
    try:
        torch.nan_to_num(torch.ones(2))
        assert calls == ["collectives"]
        ops.hold("train")
        torch.nan_to_num(torch.ones(2))
        assert calls == ["collectives", "masking", "collectives"]
    finally:
        ops.close()
    torch.nan_to_num(torch.ones(2))
    assert len(calls) == 3


def test_the_window_after_backward_is_one_mode_on_the_stack() -> None:
    """The window opens inside the backward, which torch runs through the mode with the mode
    taken off the stack; torch puts it back when the backward returns. That mode is the
    window's: a second one under it would call every op between backward and step twice."""
    import torch.nn.functional as F

    import traindoc

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    depths = []
    with traindoc.watch(announce=False):
        for _ in range(20):
            opt.zero_grad()
            F.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
            depths.append(torch._C._len_torch_function_stack())
            opt.step()
    assert depths == [1] * 16 + [0] * 4  # sampled steps (the first 16), then none


def test_gradients_all_reduced_after_backward_mark_their_parameters_synced(group: None) -> None:
    import traindoc

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    head = list(model[2].parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoc.watch(announce=False) as doc:
        for _ in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            for p in head:  # a hand-written all-reduce of the head's gradients only
                dist.all_reduce(p.grad)
            opt.step()
        synced = [p in doc.ranks._synced for p in model.parameters()]
    assert synced == [False, False, True, True]
