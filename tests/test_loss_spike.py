"""loss-spike judges each point against the exact moving average: ``Ema.update``'s arithmetic,
point by point, whatever the column's length and however it is cut. Checked on columns whose
points sit on the factor to the last bit, against that arithmetic written out here, so that a
judgement on an approximate average (a vectorized scan's rounding) or with a margin fails."""

from __future__ import annotations

import json
import math
import random
from typing import Callable

import numpy as np
import pytest

from traindoc.detectors.loss_spike import LossSpike
from traindoc.events import Series
from traindoc.findings import Finding

CONFIG = LossSpike.Config()  # factor 3, z 8, min_rise 0.1, window 20, warmup 10, recover 5
# The bar alone: the z-score against the loss's own excursions is off, since a column that climbs
# a trillionfold and drops back (below) leaves ratios after each drop that a z would read as noise.
BAR = LossSpike.Config(z=-math.inf)
N = 200_000
QUIET = range(20_000, 170_000)


def on_the_bar(n: int, seed: int,
               scale: Callable[[int], float]) -> tuple[list[float], list[tuple[int, float]]]:
    """A noisy loss (1% noise on ``scale(k)``) where every 97th point sits on the bar, by the
    moving average computed here: at random either the smallest float whose ratio to the
    average is ``factor`` or more (a jump; the next point is back down: a spike), or the
    largest whose ratio is less (an ordinary point, which enters the average). None is a jump
    in points ``QUIET``: the long spans a healthy stretch is judged in. Returns the values and
    the spikes (step, moving average)."""
    rng = random.Random(seed)
    alpha = 2.0 / (CONFIG.window + 1.0)  # Ema(window).alpha
    avg = weight = 0.0
    values: list[float] = []
    spikes: list[tuple[int, float]] = []
    for k in range(n):
        if k >= 2 * CONFIG.window and k % 97 == 0:
            value = avg / weight
            under = CONFIG.factor * value
            while under / value < CONFIG.factor:
                under = math.nextafter(under, math.inf)
            while under / value >= CONFIG.factor:
                under = math.nextafter(under, -math.inf)
            over = math.nextafter(under, math.inf)
            assert abs(under / value - CONFIG.factor) < 1e-12 and abs(over / value - CONFIG.factor) < 1e-12
            if rng.random() < 0.5 and k not in QUIET:
                values.append(over)
                spikes.append((k, value))
                continue  # a jump does not enter the average
            x = under
        else:
            x = scale(k) * (1 + 0.01 * rng.random())
        values.append(x)
        avg = (1 - alpha) * avg + alpha * x  # Ema.update
        weight = (1 - alpha) * weight + alpha
    return values, spikes


def judge(values: list[float], cuts: list[int], resume_at: int | None = None,
          config: LossSpike.Config = CONFIG) -> list[Finding]:
    """The column in pieces cut at ``cuts`` (a one-element piece: the one-point path), the
    detector saved and loaded at the cut ``resume_at``."""
    det, out = LossSpike(config), []
    edges = [0, *sorted(set(cuts)), len(values)]
    for a, b in zip(edges, edges[1:]):
        if a == resume_at:
            fresh = LossSpike(config)
            fresh.load_state_dict(json.loads(json.dumps(det.state_dict())))
            det = fresh
        if b > a:
            out += det.observe_series({"loss": Series("loss", list(range(a, b)), values[a:b])})
    return out


def check(found: list[Finding], spikes: list[tuple[int, float]]) -> None:
    assert spikes and found, "no spike on the bar was taken"
    last = found[-1].evidence
    assert last["spikes"] == len(spikes)
    assert last["spike_steps"] == [k for k, _ in spikes[:20]]
    assert [f.evidence["moving_average"] for f in found[:1]] == [spikes[0][1]]
    ratio = found[0].evidence["ratio"]
    assert isinstance(ratio, float) and ratio >= CONFIG.factor


@pytest.mark.parametrize("scale", ["flat", "decaying", "sawtooth"])
def test_points_on_the_bar_are_judged_on_the_exact_average(scale: str) -> None:
    """A long column (the averages of a long span are computed in lanes, each checked against
    the lane before it, bit for bit), whole, cut, resumed; and one whose loss climbs a
    trillionfold over 1455 points and drops back at once (lanes that start from a guess before
    a drop miss the exact average: recomputed)."""
    scales: dict[str, Callable[[int], float]] = {
        "flat": lambda k: 1.0,
        "decaying": lambda k: 0.2 + 2.5 * math.exp(-k / 30_000),
        "sawtooth": lambda k: 1e12 ** (max(k - 50, 0) % 1455 / 1455),  # no bar point near a drop
    }
    values, spikes = on_the_bar(N, seed=len(scale), scale=scales[scale])
    check(judge(values, [], config=BAR), spikes)
    check(judge(np.asarray(values).tolist(), [5, 33_333, 33_334, 180_000], resume_at=33_334, config=BAR), spikes)


def test_points_on_the_bar_one_at_a_time() -> None:
    """The live path and the rollback guard's: one point per call, the same judgement."""
    values, spikes = on_the_bar(3_000, seed=7, scale=lambda k: 0.5 + math.exp(-k / 500))
    check(judge(values, list(range(len(values))), config=BAR), spikes)
    check(judge(values, list(range(0, len(values), 256)), resume_at=1024, config=BAR), spikes)


def policy_gradient_surrogate(n: int = 300, offset: float = 0.0) -> list[float]:
    """The loss of REINFORCE as pytorch/examples' reinforce.py computes it: the sum over an
    episode of -log_prob * normalized return, which changes sign from episode to episode and
    grows with the episode's length; every 40th episode a long one. ``offset`` lifts it above
    zero (a loss that is a size: the same jumps are spikes)."""
    rng = random.Random(5)
    values = []
    for k in range(n):
        length = 150 if k % 40 == 39 else rng.randint(15, 40)
        values.append(offset + sum(rng.gauss(0.0, 0.15) for _ in range(length)) / 3 + (6.0 if length == 150 else 0.0))
    return values


def test_a_loss_that_changes_sign_has_no_ratio_to_its_average() -> None:
    values = policy_gradient_surrogate()
    assert min(values) < 0 < max(values)
    assert judge(values, []) == [] and judge(values, list(range(len(values)))) == []
    lifted = judge(policy_gradient_surrogate(offset=2.0), [])
    assert lifted and lifted[-1].evidence["spikes"] >= 3


def polynomial_fit(seed: int, steps: int = 400) -> list[float]:
    """The batch losses of a linear model fitted to a quartic of fresh Gaussian inputs
    (features x..x^4, smooth-L1, SGD at lr 0.1), as pytorch/examples' regression does: a batch
    that draws a large x weighs x^4, so the loss strays 3-30x above its average by itself."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(seed)
    coef = torch.randn(4, 1, generator=gen) * 5
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        model.weight.copy_(torch.randn(1, 4, generator=gen) * 0.5)
        model.bias.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 1, generator=gen) ** torch.arange(1, 5)
        loss = F.smooth_l1_loss(model(x), x @ coef)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_a_heavy_tailed_loss_is_judged_by_its_own_excursions() -> None:
    """The polynomial fit's batches stray far above the average every few dozen steps: its own
    tail, quiet (a median absolute deviation of the last 20 points called them spikes in each
    seed). A batch 10^7 times the average is past that tail (which reaches 130x), and fires."""
    for seed in range(6):
        losses = polynomial_fit(seed)
        ratios = [b / a for a, b in zip(losses[100:], losses[101:])]
        assert max(ratios) > CONFIG.factor  # the bar alone would fire: the check can fail
        assert judge(losses, []) == [] and judge(losses, list(range(len(losses)))) == []
        corrupt = [v * (1e7 if k == 250 else 1.0) for k, v in enumerate(losses)]
        assert [f.evidence["spike_steps"] for f in judge(corrupt, [])] == [[250]]


def test_a_noisy_loss_fires_on_jumps_past_its_own_noise() -> None:
    """Batches that vary by a factor of e^0.5 either way: quiet (each run fired before the
    judgement read the loss's own excursions); a loss that varies by 10% fires on a 4x jump."""
    rng = random.Random(3)
    for sigma, jump, fires in ((0.5, 1.0, False), (0.1, 4.0, True)):
        values = [(0.5 + 2 * math.exp(-k / 300)) * math.exp(rng.gauss(0, sigma)) for k in range(1000)]
        values[600] = jump * sum(values[580:600]) / 20 if jump > 1 else values[600]
        found = judge(values, [])
        assert ([f.evidence["spike_steps"] for f in found] == [[600]]) if fires else found == []
