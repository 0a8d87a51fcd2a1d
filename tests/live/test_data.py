"""The data probe from code (a slow __getitem__) and the starvation detector on replayed events."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import traindoc
from traindoc.analyze import analyze
from traindoc.events import LoaderWait

ID = "data-starvation"


class SlowReads(Dataset):
    """Each sample costs ``delay`` seconds, like a read from slow storage."""

    def __init__(self, n: int, delay: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)
        self.delay = delay

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay:
            time.sleep(self.delay)
        return self.x[i], self.y[i]


@contextlib.contextmanager
def watch() -> Iterator[traindoc.live.watch.Watch]:
    recorded: list[object] = []
    with traindoc.watch(announce=False) as doc:
        doc.session._sink = recorded.append
        doc.recorded = recorded  # type: ignore[attr-defined]
        yield doc


def run(loader: DataLoader, steps: int, *, no_grad_fetch: bool = False) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    while done < steps:
        it = iter(loader)
        while True:
            if no_grad_fetch:
                with torch.no_grad():
                    batch = next(it, None)
            else:
                batch = next(it, None)
            if batch is None:
                break
            x, y = batch
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            done += 1
            if done == steps:
                return


def test_slow_getitem_without_workers_fires_with_the_loader_settings() -> None:
    # A sleep is wall time that a loaded machine does not stretch, while it stretches the rest of
    # the step (the model's CPU work, traindoc's own sampled steps): the wait per batch (at least
    # 16 x 4 ms) is many times the few ms of the rest, so the share stays far past the 50% bar
    # with both cores busy.
    delay = 0.004
    loader = DataLoader(SlowReads(256, delay), batch_size=16, shuffle=True)
    with watch() as doc:
        run(loader, 50)
    found = {f.id: f for f in doc.report().findings}
    f = found[ID]
    ev = f.evidence
    assert ev["num_workers"] == 0 and ev["batch_size"] == 16 and ev["loader"] == "SlowReads"
    assert ev["wait_ms_per_step"] >= 16 * delay * 1e3  # a sleep lasts at least as long as asked
    assert ev["share"] > 0.5  # the bar with the model on the CPU
    assert "num_workers=" in f.fix and "persistent_workers=True" in f.fix
    waits = [e for e in doc.recorded if isinstance(e, LoaderWait)]
    # Timed (level "standard": steps 0-15 and 25 sampled; 16 batches a pass): rounds 16-23, 26-30,
    # 32-46 and 48. Left out: the rounds with sampled work on either side (0-15, 24, 25); those
    # that start a pass: a round closes at the next step's backward, so the batch that starts a
    # pass is drawn in the round before (15, 31, 47); and the last round, which never closes.
    assert sum(e.steps for e in waits) == 8 + 5 + 15 + 1


def test_every_round_timed_when_every_step_is_sampled() -> None:
    """At level "thorough" every step is sampled: its rounds are the only ones to time."""
    loader = DataLoader(SlowReads(256, 0.001), batch_size=16, shuffle=True)
    with traindoc.watch(announce=False, level="thorough") as doc:
        recorded: list[object] = []
        doc.session._sink = recorded.append
        run(loader, 30)
    assert sum(e.steps for e in recorded if isinstance(e, LoaderWait)) == 30 - 2 - 1


def test_in_memory_loader_is_quiet() -> None:
    loader = DataLoader(SlowReads(256, 0.0), batch_size=16, shuffle=True)
    with watch() as doc:
        run(loader, 30)
    assert ID not in {f.id for f in doc.report().findings}


def test_batches_drawn_under_no_grad_are_not_training_waits() -> None:
    loader = DataLoader(SlowReads(64, 0.001), batch_size=16)
    with watch() as doc:
        run(loader, 12, no_grad_fetch=True)
    assert not [e for e in doc.recorded if isinstance(e, LoaderWait)]


def wait(step: int, wait_ms: float, step_ms: float, steps: int = 1, device: str = "cuda") -> LoaderWait:
    return LoaderWait(step=step, steps=steps, wait_s=wait_ms / 1e3, step_s=step_ms / 1e3,
                      loader="ImageFolder", batch_size=64, device=device)


@pytest.mark.parametrize("waits,fires", [
    ([wait(s, 40, 60) for s in range(1, 25)], True),   # 67% of the step, 40 ms
    ([wait(s, 40, 60) for s in range(1, 10)], False),  # too few steps
    ([wait(s, 3, 4) for s in range(1, 40)], False),    # a toy run: large share, 3 ms
    ([wait(s, 12, 100) for s in range(1, 40)], False),  # 12% of the step
    ([wait(s, 14, 40) for s in range(1, 40)], True),  # 35% on an accelerator
    ([wait(s, 14, 40, device="cpu") for s in range(1, 40)], False),  # 35% with CPU compute
    ([wait(s, 30, 40, device="cpu") for s in range(1, 40)], True),  # 75% with CPU compute
    # the probe's last event, sent when it stops, names no device: still judged as a CPU run
    ([wait(s, 12, 30, device="cpu") for s in range(1, 31)] + [wait(31, 12, 30, device="")], False),
])
def test_detector_thresholds(waits: list[LoaderWait], fires: bool) -> None:
    report = analyze(waits, select=[ID])
    assert (ID in {f.id for f in report.findings}) == fires


def test_detector_fires_where_the_window_reaches_min_steps() -> None:
    waits = [wait(s, 40, 60) for s in range(1, 16)] + [wait(40, 40, 60, steps=25)]
    (f,) = analyze(waits, select=[ID]).findings
    assert f.step == 40 and f.evidence["steps_measured"] == 40
