"""A loss summed over a varying number of model calls (an RL episode's steps) has no scale of
its own: loss-spike and divergence stop judging it. Seen live as the model's training forwards
before each backward (``Forwards``, sent when the count changes); a GAN's fixed counts are not
rollouts."""

from __future__ import annotations

import json
import math

import torch
import torch.nn as nn

import traindoc
from traindoc.detectors.divergence import Divergence
from traindoc.detectors.loss_spike import LossSpike
from traindoc.detectors._maths import Rollouts
from traindoc.events import Forwards, Series


def test_episode_lengths_are_rollouts_and_a_gans_fixed_calls_are_not() -> None:
    gan, episodes = Rollouts(), Rollouts()
    for step in range(40):
        gan.see(step, 3 if step % 2 == 0 else 1)  # D's backward after 3 calls, G's after 1
        episodes.see(step, [12, 30, 9, 55, 14, 200][step % 6])
    assert gan.since is None
    assert episodes.since == 3  # the fourth different length, the longest over twice the shortest
    again = Rollouts()
    again.load_state_dict(json.loads(json.dumps(episodes.state_dict())))
    assert again.since == 3


def episode_sums(n: int = 120) -> tuple[list[Forwards], list[float]]:
    """Each step a backward after one call per environment step; the loss a sum over them that
    grows with the episode, as a policy-gradient loss does when the policy gets better."""
    lengths = [10 + (k * 7) % 13 if k < 60 else 150 + (k * 11) % 40 for k in range(n)]
    backwards = [Forwards(step=k, count=length) for k, length in enumerate(lengths)]
    loss = [0.3 * length * (1.0 + 0.1 * math.sin(k)) for k, length in enumerate(lengths)]
    return backwards, loss


def judge(det: LossSpike | Divergence, backwards: list[Forwards] | None, loss: list[float]) -> list[str]:
    found = []
    for step, value in enumerate(loss):  # a step's count comes before its loss, as live
        if backwards is not None:
            det.observe(backwards[step])
        found += [f.id for f in det.observe_series({"loss": Series("loss", [step], [value])}) or ()]
    found += [f.id for f in det.finish() or ()]
    return found


def test_a_loss_that_follows_the_episode_length_is_not_judged() -> None:
    backwards, loss = episode_sums()
    assert "divergence" in judge(Divergence(), None, loss)  # the check can fail: same numbers, no counts
    assert judge(Divergence(), backwards, loss) == []
    # x12: twice what the loss's own +-40% batches need (x6 is within their excursions)
    jumps = [v * (12.0 if k % 30 == 29 else 1.0) for k, v in enumerate(loss)]
    assert "loss-spike" in judge(LossSpike(), None, jumps)
    assert judge(LossSpike(), backwards, jumps) == []


def test_the_live_run_counts_the_models_calls_before_each_backward() -> None:
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    lengths = [5, 9, 3, 12, 7, 20]
    recorded: list[object] = []
    with traindoc.watch(announce=False, level="thorough") as doc:  # every step sampled
        doc.session._sink = recorded.append
        for length in lengths:
            loss = sum(policy(torch.randn(4)).logsumexp(0) for _ in range(length))
            opt.zero_grad()
            loss.backward()  # type: ignore[union-attr]
            opt.step()
    assert [e.count for e in recorded if isinstance(e, Forwards)] == lengths  # each a change
    assert [e.step for e in recorded if isinstance(e, Forwards)] == list(range(len(lengths)))
    assert {e.rows for e in recorded if isinstance(e, Forwards)} == {1}  # one unbatched state a call


def td_losses(n: int = 400) -> list[float]:
    """One transition's loss a step, as a one-step actor-critic's: a squared TD error around 1,
    and at each episode's end (every 15th step, no bootstrap) one many times the rest."""
    return [(30.0 if k % 15 == 14 else 1.0) * (1.0 + 0.2 * math.sin(k)) for k in range(n)]


def test_a_loss_of_one_sample_is_not_judged() -> None:
    """Each backward's calls saw one row (rows 1): the loss is one sample's, with no scale; the
    same numbers from batches (rows 32) are judged, and a batch of one at the end of an epoch
    (rows back to 32 at the next sampled step) pauses the judgement only while it lasts."""
    loss = td_losses()
    one = [Forwards(step=k, count=2, rows=1) for k in range(len(loss))]
    batched = [Forwards(step=k, count=1, rows=32) for k in range(len(loss))]
    assert "loss-spike" in judge(LossSpike(), batched, loss)  # the check can fail
    assert judge(LossSpike(), one, loss) == [] and judge(Divergence(), one, loss) == []
    rollouts = Rollouts()
    for step, rows in enumerate([32, 32, 1, 32]):
        rollouts.see(step, 1, rows)
        assert rollouts.judged is (rows != 1)
    again = Rollouts()
    rollouts.see(4, 1, 1)
    again.load_state_dict(json.loads(json.dumps(rollouts.state_dict())))
    assert again.one_row and not again.judged


def test_the_live_run_counts_the_rows_a_call_sees() -> None:
    torch.manual_seed(0)
    actor, critic = nn.Linear(4, 2), nn.Linear(4, 1)
    opt = torch.optim.SGD([*actor.parameters(), *critic.parameters()], lr=1e-3)
    recorded: list[object] = []
    with traindoc.watch(announce=False, level="thorough") as doc:
        doc.session._sink = recorded.append
        for batch in (1, 1, 8, 8):
            state = torch.randn(4) if batch == 1 else torch.randn(batch, 4)  # one state, or a batch
            loss = actor(state).logsumexp(-1).sum() + critic(state).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    sent = [(e.step, e.count, e.rows) for e in recorded if isinstance(e, Forwards)]
    assert sent == [(0, 2, 1), (2, 2, 8)]  # sent when the calls or their rows change


def test_a_loss_whose_targets_the_model_computes_is_not_judged() -> None:
    """A DQN's TD loss grows as the values it bootstraps from grow: from the first Forwards that
    says the model (or a copy) also ran without gradients in each step, the loss has no scale of
    its own; the same numbers from a supervised loop are judged, and it carries over a resume."""
    growing = [0.05 * (1.0 + 0.3 * math.sin(k)) * (1.0 + k / 20) for k in range(400)]  # x20
    plain = [Forwards(step=k, count=1, rows=16) for k in range(len(growing))]
    boot = [Forwards(step=k, count=1, rows=16, bootstrap=k >= 4) for k in range(len(growing))]
    assert "divergence" in judge(Divergence(), plain, growing)  # the check can fail
    assert judge(Divergence(), boot, growing) == []
    rollouts, again = Rollouts(), Rollouts()
    rollouts.see(4, 1, 16, bootstrap=True)
    rollouts.see(5, 1, 16)  # a step without it later: still the same loss
    again.load_state_dict(json.loads(json.dumps(rollouts.state_dict())))
    assert not rollouts.judged and again.bootstrapped == 4 and not again.judged


def test_the_live_run_sees_a_target_network_run_without_gradients() -> None:
    torch.manual_seed(0)
    online, target = nn.Linear(4, 2), nn.Linear(4, 2)
    teacher = nn.Linear(4, 8)  # another model's shapes: a teacher, no bootstrap
    opt = torch.optim.SGD(online.parameters(), lr=1e-3)

    def run(net: nn.Module, rows: int = 16, mode: bool = True) -> list[Forwards]:
        net.train(mode)
        recorded: list[object] = []
        with traindoc.watch(announce=False, level="thorough") as doc:
            doc.session._sink = recorded.append
            for _ in range(8):
                s, s2 = torch.randn(16, 4), torch.randn(rows, 4)
                with torch.no_grad():
                    best = net(s2).max(1).values.mean()
                loss = (online(s).max(1).values - best).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        return [e for e in recorded if isinstance(e, Forwards)]

    sent = run(target)
    assert [(e.step, e.bootstrap) for e in sent] == [(0, False), (4, True)]  # the 4th in a row
    assert [e.bootstrap for e in run(teacher)] == [False]
    assert [e.bootstrap for e in run(online, rows=3)] == [False]  # a prediction on 3 test rows
    # A target network kept in eval mode (Stable-Baselines3's DQN and SAC) is one all the same;
    # the trained model itself in eval mode on each step's batch is an evaluation, not a target.
    assert [(e.step, e.bootstrap) for e in run(target, mode=False)] == [(0, False), (4, True)]
    assert [e.bootstrap for e in run(online, mode=False)] == [False]
