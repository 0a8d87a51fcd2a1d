"""Dead-ReLU windows count rows, not calls: one observation at a time is not a batch.

A loop that runs its model on one row per call (a policy stepping through an episode, online
learning) with dropout before the ReLU leaves live units silent over a few calls by chance, and
the calls of one step see nearly the same input. Here each step runs one of 16 contexts twelve
times, a row a call: in one context about two thirds of the hidden units are negative, but every
unit is positive in some context. A window of 8 calls (one step's) found two thirds "dead";
a window of 256 rows spans many contexts and finds none. Units that are dead for every
context are still found in the same loop.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.events import Activation
from traindoc.live.model import RELU_ROWS


def episodic_one_row_at_a_time(steps: int = 40, bias: float = -1.2) -> list[float]:
    torch.manual_seed(0)
    contexts = 2.0 * torch.randn(16, 8)
    model = nn.Sequential(nn.Linear(8, 64), nn.Dropout(0.5), nn.ReLU(), nn.Linear(64, 1))
    with torch.no_grad():
        model[0].bias.fill_(bias)  # units selective: each fires for some contexts only
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        context = contexts[step % len(contexts)]
        loss = torch.zeros(())
        for t in range(12):  # one row a call, nearly the same input within the step
            x = (context + 0.01 * torch.randn(8)).unsqueeze(0)
            loss = loss + F.mse_loss(model(x), torch.ones(1, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _watched(**kwargs: float) -> tuple[list[str], list[Activation]]:
    recorded: list[object] = []
    with traindoc.watch(announce=False, level="thorough") as doc:  # every step sampled
        doc.session._sink = recorded.append
        episodic_one_row_at_a_time(**kwargs)  # type: ignore[arg-type]
    dead = [e for e in recorded if isinstance(e, Activation) and e.dead is not None]
    return [f.id for f in doc.findings], dead


def test_the_loop_is_what_the_docstring_says() -> None:
    """Per context about two thirds of the units are negative; across contexts almost none."""
    torch.manual_seed(0)
    contexts = 2.0 * torch.randn(16, 8)
    layer = nn.Linear(8, 64)
    with torch.no_grad():
        layer.bias.fill_(-1.2)
        positive = layer(contexts) > 0
    per_context = 1 - positive.float().mean(1)
    assert per_context.min() > 0.5
    assert 1 - positive.any(0).float().mean() < 0.1


def test_units_silent_in_one_context_are_not_dead() -> None:
    found, dead = _watched()
    assert dead, "no window was judged"
    assert all(e.rows >= RELU_ROWS for e in dead), [e.rows for e in dead]
    assert max(e.dead for e in dead if e.dead is not None) < 0.2
    assert "dead-relu" not in found


def test_units_dead_in_every_context_are_found() -> None:
    found, dead = _watched(bias=-30.0)
    assert "dead-relu" in found
    assert min(e.dead for e in dead if e.dead is not None) > 0.9


def window(step: int, dead: float) -> Activation:
    return Activation(step=step, module="input of fc2", type="relu-like", dead=dead,
                      units=128, batches=8, rows=512)


def test_units_that_fire_again_keep_the_evidence_of_the_windows_that_fired() -> None:
    """The report at the end: the windows that fired, and that later ones were under the
    threshold (before, the final finding listed no module at all)."""
    from traindoc.detectors.dead_relu import DeadRelu

    det = DeadRelu()
    assert list(det.observe(window(100, 0.6))) == []  # the next window confirms it or not
    fired = list(det.observe(window(150, 0.65)))
    assert [f.evidence["modules"] for f in fired] == [{"input of fc2": 0.65}] and fired[0].step == 100
    list(det.observe(window(200, 0.1)))
    (final,) = det.finish()
    assert final.evidence["modules"] == {"input of fc2": 0.65} and final.evidence["recovered"] is True
    assert final.step == 100 and "By step 200 it was 10% at most" in final.message

    still = DeadRelu()
    list(still.observe(window(100, 0.6)))
    list(still.observe(window(200, 0.7)))
    (final,) = still.finish()
    assert final.evidence["modules"] == {"input of fc2": 0.7} and final.evidence["recovered"] is False


def test_one_window_over_the_threshold_is_not_enough_unless_it_is_the_last() -> None:
    """Half the units of an RL agent's Q-network silent on one window of its early, narrow
    states (Stable-Baselines3's DQN on CartPole: 50%, then 47%) are not dead units; a window
    over the threshold that ends the run has none after it to say so, and is reported."""
    from traindoc.detectors.dead_relu import DeadRelu

    det = DeadRelu()
    for step, dead in ((100, 0.2), (200, 0.5), (300, 0.47), (400, 0.3)):
        assert list(det.observe(window(step, dead))) == []
    assert list(det.finish()) == []

    last = DeadRelu()
    for step, dead in ((100, 0.2), (200, 0.3), (300, 0.55)):
        assert list(last.observe(window(step, dead))) == []
    (final,) = last.finish()
    assert final.step == 300 and final.evidence["modules"] == {"input of fc2": 0.55}
