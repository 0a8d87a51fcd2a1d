"""A module called many times a step costs a sampled step a bounded amount: its first calls are
measured, the rest pass (``live.probes.base.FirstCalls``).

Two styles of recurrent training, where a cell runs once per time step in a Python loop: the
cell stepped inside the model's ``forward`` with an LBFGS closure (as PyTorch's
time_sequence_prediction example trains), and a GRU cell stepped by the training loop itself,
at the top level (each call a "root" forward), with Adam and a truncated backward. Without the
bound, a sampled step measured all 60 calls of each cell: the forward cost several times a bare
one (1.32x the whole run of that example, 1.10x with the bound: benchmarks/live_real.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterator

import pytest
import torch
import torch.nn as nn

import traindoc
from traindoc.live.model import ModelWatch
from traindoc.live.probes.autocast import AutocastCoverage
from traindoc.live.probes.base import FirstCalls

STEPS_IN_TIME = 60


class Waves(nn.Module):
    """Two stacked LSTM cells and a linear read-out, stepped over the sequence in ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 16)
        self.lstm2 = nn.LSTMCell(16, 16)
        self.out = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h1 = c1 = torch.zeros(x.size(0), 16)
        h2 = c2 = torch.zeros(x.size(0), 16)
        outputs = []
        for t in range(x.size(1)):
            h1, c1 = self.lstm1(x[:, t:t + 1], (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.out(h2))
        return torch.cat(outputs, dim=1)


def train_waves(steps: int = 3) -> list[float]:
    torch.manual_seed(0)
    t = torch.arange(STEPS_IN_TIME + 1, dtype=torch.float32)
    waves = torch.sin((t[None, :] + torch.randint(-20, 20, (8, 1))) / 6.0)
    x, y = waves[:, :-1], waves[:, 1:]
    model = Waves()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    loss_fn = nn.MSELoss()
    losses = []
    for _ in range(steps):
        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            return loss

        losses.append(opt.step(closure).item())
    return losses


def train_gru_loop(steps: int = 20) -> list[float]:
    """A character model stepped by the loop: one cell call per character, a truncated backward
    every 20 characters (the hidden state detached), plain Adam."""
    torch.manual_seed(0)
    emb, cell, head = nn.Embedding(12, 8), nn.GRUCell(8, 32), nn.Linear(32, 12)
    params = [*emb.parameters(), *cell.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=3e-3)
    text = torch.randint(0, 12, (4, STEPS_IN_TIME + 1))
    losses = []
    h = torch.zeros(4, 32)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.zeros(())
        for t in range(STEPS_IN_TIME):
            h = cell(emb(text[:, t]), h)
            loss = loss + nn.functional.cross_entropy(head(h), text[:, t + 1])
        (loss / STEPS_IN_TIME).backward()
        opt.step()
        h = h.detach()
        losses.append(loss.item())
    return losses


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """How many times each module's output is measured (dead units, NaN, autocast rows), by
    ``what:Type#n`` (n: the module's order of first appearance)."""
    counts: Counter[str] = Counter()
    order: dict[int, int] = {}
    for owner, name in ((ModelWatch, "on_module_output"), (AutocastCoverage, "_record")):
        orig = getattr(owner, name)

        def counting(self: Any, module: Any, output: Any, *rest: Any, _orig: Any = orig, _name: str = name) -> None:
            n = order.setdefault(id(module), len(order))
            counts[f"{_name}:{type(module).__name__}#{n}"] += 1
            _orig(self, module, output, *rest)

        monkeypatch.setattr(owner, name, counting)
    yield counts


@pytest.mark.parametrize("train", [train_waves, train_gru_loop])
def test_a_sampled_step_measures_each_module_a_bounded_number_of_times(
        train: Any, measured: Counter[str]) -> None:
    with traindoc.watch(announce=False, level="thorough") as doc:  # every step sampled
        train()
    rounds = doc.report().run["steps"]
    assert rounds >= 3
    cells = {k: v for k, v in measured.items() if "Cell" in k}
    assert cells, measured
    # A cell runs 60 times a forward; each sampled step measures its first FirstCalls.LIMIT.
    assert all(v <= rounds * FirstCalls.LIMIT for v in cells.values()), (cells, rounds)


def test_without_the_bound_every_call_is_measured(monkeypatch: pytest.MonkeyPatch, measured: Counter[str]) -> None:
    """The check above can fail: with no bound the same run measures every call."""
    monkeypatch.setattr(FirstCalls, "LIMIT", 10**9)
    with traindoc.watch(announce=False, level="thorough") as doc:
        train_gru_loop(steps=3)
    assert doc.report().run["steps"] == 3
    assert [v for k, v in measured.items() if k.startswith("on_module_output:GRUCell")] == [3 * STEPS_IN_TIME]


@pytest.mark.parametrize("train", [train_waves, train_gru_loop])
def test_recurrent_training_is_unchanged_and_reports_nothing(train: Any) -> None:
    bare = train()
    with traindoc.watch(announce=False) as doc:
        watched = train()
    assert watched == bare
    assert [f.id for f in doc.findings if f.severity != "info"] == []


def _mode_calls(monkeypatch: pytest.MonkeyPatch, aside: bool) -> Counter[str]:
    """The functions our TorchFunctionMode is handed during a watched run of a model whose
    forward calls no ``isnan`` (only the forward hooks' NaN check does)."""
    from traindoc.live.probes import _ops

    seen: Counter[str] = Counter()
    orig = _ops._Mode.__torch_function__

    def counting(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        seen[getattr(func, "__name__", str(func))] += 1
        return orig(self, func, types, args, kwargs)

    monkeypatch.setattr(_ops._Mode, "__torch_function__", counting)
    if not aside:
        monkeypatch.setattr(_ops.OpsWatch, "aside", lambda self: None)
    with traindoc.watch(announce=False, level="thorough"):
        train_gru_loop(steps=3)
    return seen


def test_the_hooks_measure_outside_our_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampled forward's own measurements (the NaN check of each output) run with our mode off
    the stack: no Python call each, and no listener of the mode sees them. The user's ops in the
    forward still pass through it."""
    seen = _mode_calls(monkeypatch, aside=True)
    assert seen["isnan"] == 0 and seen["cross_entropy"] > 0, seen
    monkeypatch.undo()
    assert _mode_calls(monkeypatch, aside=False)["isnan"] > 0  # the check can fail
