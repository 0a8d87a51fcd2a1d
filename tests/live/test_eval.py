"""The evaluation probes from code: train mode, determinism (without touching the user's RNG),
stale BatchNorm statistics of an EMA copy, and evaluation time."""

from __future__ import annotations

import contextlib
import copy
import random
from typing import Iterator

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.analyze import analyze
from traindoc.events import BatchNormState, EvalPass, RunEnd

TRAIN_MODE = "eval-in-train-mode"
NONDET = "nondeterministic-eval"
STALE = "stale-bn-eval"


@contextlib.contextmanager
def watch() -> Iterator[traindoc.live.watch.Watch]:
    recorded: list[object] = []
    with traindoc.watch(announce=False) as doc:
        doc.session._sink = recorded.append
        doc.recorded = recorded  # type: ignore[attr-defined]
        yield doc


def ids(doc: traindoc.live.watch.Watch) -> dict[str, object]:
    return {f.id: f for f in doc.report().findings}


def passes(doc: traindoc.live.watch.Watch) -> list[EvalPass]:
    return [e for e in doc.recorded if isinstance(e, EvalPass)]


class Noisy(nn.Module):
    """Functional dropout without the mode: random in eval mode too."""

    def __init__(self, p: float = 0.2) -> None:
        super().__init__()
        self.fc1, self.fc2, self.p = nn.Linear(8, 32), nn.Linear(32, 3), p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.dropout(F.relu(self.fc1(x)), p=self.p))


class Counter(nn.Module):
    """A module that changes a buffer in every forward, eval mode included."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.fc(x)


def bn_net() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))


def train(model: nn.Module, *, steps: int = 12, every: int = 4, set_eval: bool = True,
          evaluated: nn.Module | None = None, ema: bool = False) -> list[float]:
    """Train, evaluating every ``every`` steps; returns the evaluation outputs' sums."""
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    target = evaluated if evaluated is not None else model
    x_val = torch.randn(64, 8, generator=torch.Generator().manual_seed(7))
    out = []
    for step in range(steps):
        x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if ema:
            with torch.no_grad():
                for e, p in zip(target.parameters(), model.parameters()):
                    e.mul_(0.9).add_(p, alpha=0.1)
        if (step + 1) % every == 0:
            if set_eval:
                target.eval()
            with torch.no_grad():
                out.append(float(target(x_val).sum()))
            model.train()
    return out


def params(model: nn.Module) -> list[torch.Tensor]:
    return [t.clone() for t in model.state_dict().values()]


# ---- eval in train mode --------------------------------------------------------------------------
def test_eval_in_train_mode_names_the_modules() -> None:
    torch.manual_seed(0)
    with watch() as doc:
        train(bn_net(), set_eval=False)
    f = ids(doc)[TRAIN_MODE]
    assert f.step == 3
    assert f.evidence["train_mode_modules"] == ["1 (BatchNorm1d)", "3 (Dropout)"]
    assert f.evidence["evaluations_in_train_mode"] == 3
    assert "test_eval.py:" in f.where[0] and "model.eval()" in f.fix


def test_eval_mode_is_quiet() -> None:
    torch.manual_seed(0)
    with watch() as doc:
        train(bn_net())
    found = ids(doc)
    assert TRAIN_MODE not in found and NONDET not in found and STALE not in found
    ps = passes(doc)
    assert [p.step for p in ps] == [3, 7, 11]
    assert ps[0].rerun == 0.0 and ps[0].role == "model" and ps[0].duration_s > 0


def test_model_without_mode_dependent_layers_is_quiet_in_train_mode() -> None:
    torch.manual_seed(0)
    with watch() as doc:
        train(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)), set_eval=False)
    assert TRAIN_MODE not in ids(doc)


def test_update_bn_is_not_an_evaluation() -> None:
    torch.manual_seed(0)
    model = bn_net()
    swa = torch.optim.swa_utils.AveragedModel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = [(torch.randn(16, 8),) for _ in range(4)]
    with watch() as doc:
        for _ in range(3):
            F.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 3, (16,))).backward()
            opt.step()
            opt.zero_grad()
            swa.update_parameters(model)
        torch.optim.swa_utils.update_bn(data, swa)  # train mode under no_grad, on purpose
    assert TRAIN_MODE not in ids(doc)


# ---- nondeterministic eval -----------------------------------------------------------------------
def test_functional_dropout_in_eval_mode_fires_and_names_the_module() -> None:
    torch.manual_seed(0)
    with watch() as doc:
        train(Noisy())
    f = ids(doc)[NONDET]
    assert f.step == 3 and f.evidence["relative_difference"] > 1e-2
    assert f.evidence["first_differing_module"] == "fc2 (Linear)"
    assert TRAIN_MODE not in ids(doc)  # no nn.Dropout: the mode has nothing to switch


def test_rerun_leaves_rng_and_training_bit_identical() -> None:
    """The re-run draws random numbers (functional dropout): RNG states are put back."""
    torch.manual_seed(0)
    bare_model = Noisy()
    watched_model = copy.deepcopy(bare_model)
    random.seed(3)
    np.random.seed(3)
    bare_out = train(bare_model, steps=16)
    bare_rng = (torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].tolist())
    random.seed(3)
    np.random.seed(3)
    with watch() as doc:
        watched_out = train(watched_model, steps=16)
    watched_rng = (torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].tolist())
    assert [p.rerun > 0 for p in passes(doc)][:2] == [True, True]  # it did re-run (and differ)
    assert bare_out == watched_out
    assert torch.equal(bare_rng[0], watched_rng[0]) and bare_rng[1:] == watched_rng[1:]
    for a, b in zip(params(bare_model), params(watched_model)):
        assert torch.equal(a, b)


def test_rerun_puts_back_a_buffer_the_forward_changed() -> None:
    torch.manual_seed(0)
    bare, watched = Counter(), Counter()
    watched.load_state_dict(bare.state_dict())
    train(bare)
    with watch() as doc:
        train(watched)
    assert passes(doc)[0].rerun == 0.0  # re-ran: deterministic
    assert float(watched.calls) == float(bare.calls)


def test_no_rerun_when_the_user_has_forward_hooks() -> None:
    torch.manual_seed(0)
    model = Noisy()
    seen: list[int] = []
    model.fc1.register_forward_hook(lambda m, a, o: seen.append(1))
    with watch() as doc:
        train(model)
    assert all(np.isnan(p.rerun) for p in passes(doc))
    assert NONDET not in ids(doc)
    assert len(seen) == 12 + 3  # one per training step and per evaluation: none added


# ---- stale BatchNorm statistics of an EMA copy ---------------------------------------------------
def test_ema_copy_with_stale_bn_fires() -> None:
    torch.manual_seed(0)
    model = bn_net()
    ema = copy.deepcopy(model)
    with watch() as doc:
        train(model, evaluated=ema, ema=True)
    f = ids(doc)[STALE]
    assert f.evidence["role"] == "ema" and f.evidence["modules"] == ["1"]
    states = [e for e in doc.recorded if isinstance(e, BatchNormState)]
    assert {e.role for e in states} == {"ema", "model"}
    assert passes(doc)[0].role == "copy"


def test_ema_with_buffers_is_quiet() -> None:
    torch.manual_seed(0)
    model = bn_net()
    ema = torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9), use_buffers=True)
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with watch() as doc:
        for step in range(12):
            F.cross_entropy(model(torch.randn(32, 8)), torch.randint(0, 3, (32,))).backward()
            opt.step()
            opt.zero_grad()
            ema.update_parameters(model)
            if (step + 1) % 4 == 0:
                ema.eval()
                with torch.no_grad():
                    ema(torch.randn(16, 8))
    assert STALE not in ids(doc)


# ---- slow eval (replayed: timing is the run's) ---------------------------------------------------
def phase(step: int, start: float, duration: float) -> EvalPass:
    return EvalPass(step=step, model="MLP", role="model", duration_s=duration, elapsed_s=start + duration)


def test_slow_eval_fires_on_the_share_between_evaluations() -> None:
    # every 5 steps: 0.2 s of evaluation and 0.05 s of training (10 ms per step): 80%
    evals = [phase(4 + 5 * k, 1.0 + 0.25 * k, 0.2) for k in range(10)]
    report = analyze([*evals, RunEnd(steps=50, duration_s=4.0)], select=["slow-eval"])
    (f,) = report.findings
    assert f.severity == "info" and f.evidence["share"] == pytest.approx(0.8)
    assert f.evidence["interval_steps"] == 5 and f.evidence["ms_per_train_step"] == pytest.approx(10.0)
    assert f.evidence["suggested_interval"] == 180  # 9 * 0.2 s / 10 ms


def test_slow_eval_quiet_for_rare_evaluations_and_a_final_one() -> None:
    evals = [phase(99 + 100 * k, 1.0 + 1.1 * k, 0.1) for k in range(4)]
    assert analyze([*evals, RunEnd(steps=400, duration_s=6.0)], select=["slow-eval"]).findings == []
    one = [phase(99, 1.0, 5.0)]
    assert analyze([*one, RunEnd(steps=100, duration_s=6.0)], select=["slow-eval"]).findings == []


def test_model_then_stale_ema_in_one_phase_finds_the_ema() -> None:
    """timm-style: validate the model, then the EMA; both are looked at, the EMA is stale."""
    torch.manual_seed(0)
    model = bn_net()
    ema = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x_val = torch.randn(16, 8)
    with watch() as doc:
        for step in range(8):
            F.cross_entropy(model(torch.randn(32, 8)), torch.randint(0, 3, (32,))).backward()
            opt.step()
            opt.zero_grad()
            with torch.no_grad():
                for e, p in zip(ema.parameters(), model.parameters()):
                    e.mul_(0.9).add_(p, alpha=0.1)
            if (step + 1) % 4 == 0:
                for m in (model, ema):
                    m.eval()
                    with torch.no_grad():
                        m(x_val)
                model.train()
    ps = passes(doc)
    assert [(p.step, p.role, p.index) for p in ps] == [
        (3, "model", 0), (3, "copy", 1), (7, "model", 0), (7, "copy", 1)]
    assert ps[1].duration_s == 0.0 and ps[0].duration_s > 0
    assert ids(doc)[STALE].evidence["role"] == "ema"


# ---- a policy that samples its action in forward (an RL rollout in eval mode) -------------------
class DiscretePolicy(nn.Module):
    """Stable-Baselines3's shape: forward returns (actions, values, log_probs), the actions drawn
    from a Categorical; ``p`` > 0 adds functional dropout (random in eval mode too)."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.body, self.pi, self.v, self.p = nn.Linear(4, 32), nn.Linear(32, 2), nn.Linear(32, 1), p
        self.drop = nn.Dropout(0.2)  # off in eval mode (F.dropout with training=False)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.drop(torch.tanh(self.body(obs)))
        if self.p:
            h = F.dropout(h, self.p)
        dist = torch.distributions.Categorical(logits=self.pi(h))
        action = dist.sample()
        return action, self.v(h), dist.log_prob(action)


class SquashedGaussian(nn.Module):
    """A SAC actor's shape: a reparameterised draw from Normal(mu, std), squashed by tanh."""

    def __init__(self) -> None:
        super().__init__()
        self.mu, self.log_std = nn.Linear(3, 1), nn.Linear(3, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        std = self.log_std(obs).clamp(-5, 2).exp()
        return torch.tanh(torch.distributions.Normal(self.mu(obs), std).rsample())


def rollouts(policy: nn.Module, obs_dim: int, updates: int = 12, horizon: int = 64) -> list[float]:
    """Collect ``horizon`` one-observation steps in eval mode without gradients, then update
    on them; returns the actions taken (the run's own numbers)."""
    torch.manual_seed(0)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    taken = []
    for _ in range(updates):
        policy.eval()
        batch = []
        with torch.no_grad():
            for _ in range(horizon):
                obs = torch.randn(1, obs_dim)
                out = policy(obs)
                taken.append(float((out[0] if isinstance(out, tuple) else out).sum()))
                batch.append(obs)
        policy.train()
        out = policy(torch.cat(batch))
        loss = (out[1].pow(2).mean() - out[2].mean()) if isinstance(out, tuple) else out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return taken


def test_a_policy_drawing_its_actions_is_not_nondeterministic_nor_evaluated() -> None:
    for make, dim in ((DiscretePolicy, 4), (SquashedGaussian, 3)):
        torch.manual_seed(1)
        bare = rollouts(make(), dim)
        torch.manual_seed(1)
        with watch() as doc:
            watched = rollouts(make(), dim)
        assert watched == bare  # the re-run's draws leave the user's RNG where it was
        seen = passes(doc)
        assert seen and all(p.sampled for p in seen), make.__name__
        assert NONDET not in ids(doc) and "slow-eval" not in ids(doc)
    with watch() as doc:  # the check can fail: dropout that ignores eval mode, beside the draw
        rollouts(DiscretePolicy(p=0.3), 4)
    assert not any(p.sampled for p in passes(doc))
    assert ids(doc)[NONDET].evidence["first_differing_module"] in ("pi (Linear)", "v (Linear)")


def test_a_sampled_pass_is_not_judged_by_the_detectors() -> None:
    differs = EvalPass(step=3, model="Policy", role="model", duration_s=0.2, elapsed_s=1.0, rerun=0.9,
                       rerun_abs=0.9)
    assert [f.id for f in analyze([differs], select=[NONDET]).findings] == [NONDET]
    sampled = EvalPass(step=3, model="Policy", role="model", duration_s=0.2, elapsed_s=1.0, rerun=0.9,
                       rerun_abs=0.9, sampled=True)
    assert analyze([sampled], select=[NONDET]).findings == []
    acting = [phase(4 + 5 * k, 1.0 + 0.25 * k, 0.2) for k in range(10)]  # 80% of the time
    assert analyze([*acting, RunEnd(steps=50, duration_s=4.0)], select=["slow-eval"]).findings
    acting = [EvalPass(**{**e.__dict__, "sampled": True}) for e in acting]
    assert analyze([*acting, RunEnd(steps=50, duration_s=4.0)], select=["slow-eval"]).findings == []


def greedy_dqn(rows: int, steps: int = 150) -> traindoc.live.watch.Watch:
    """A DQN written after Stable-Baselines3's: each of 4 environment steps picks the action
    greedily from the Q-network in eval mode under no_grad (``rows`` observations: one per
    environment), the environment takes a millisecond, then one update on a replay batch."""
    import time

    torch.manual_seed(0)
    q_net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.Adam(q_net.parameters(), lr=1e-3)
    replay = torch.randn(256, 4)
    with watch() as doc:
        for _ in range(steps):
            q_net.train(False)
            for _ in range(4):
                with torch.no_grad():
                    action = q_net(torch.randn(rows, 4)).argmax(dim=1).reshape(-1)
                time.sleep(0.001)  # env.step(action)
            q_net.train(True)
            batch = replay[torch.randint(0, 256, (32,))]
            loss = F.smooth_l1_loss(q_net(batch).max(dim=1).values, torch.zeros(32))
            opt.zero_grad()
            loss.backward()
            opt.step()
    del action
    return doc


def test_a_dqn_acting_greedily_on_one_observation_is_not_an_evaluation() -> None:
    acting = greedy_dqn(rows=1)
    assert passes(acting) and all(p.rows == 1 for p in passes(acting))
    assert "slow-eval" not in ids(acting)
    # the same loop evaluating 64 rows after every step is what slow-eval is for
    assert "slow-eval" in ids(greedy_dqn(rows=64))


def test_one_row_evaluated_every_few_steps_is_still_judged() -> None:
    one_row = [EvalPass(**{**phase(4 + 5 * k, 1.0 + 0.25 * k, 0.2).__dict__, "rows": 1}) for k in range(10)]
    assert analyze([*one_row, RunEnd(steps=50, duration_s=4.0)], select=["slow-eval"]).findings
    every_step = [EvalPass(**{**phase(k, 1.0 + 0.25 * k, 0.2).__dict__, "rows": 1}) for k in range(10)]
    assert analyze([*every_step, RunEnd(steps=10, duration_s=4.0)], select=["slow-eval"]).findings == []
