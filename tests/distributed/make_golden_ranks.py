"""Writes golden streams of cross-rank events (tests/golden/, no torch).

Run `python tests/distributed/make_golden_ranks.py` after changing it. Each stream holds what
rank 0's detectors see live from two ranks: every rank's ``RankLoss`` (its own loss on each
step since the previous one it sent), here sent every 10 steps, or its ``RankTime`` on the
sampled steps of ``--level standard``.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from traindoc.events import RankLoss, RankTime, RunEnd, RunStart
from traindoc.record import dump_line

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def losses(steps: int, seed: int, scale: float = 1.0) -> list[float]:
    """A healthy loss curve with minibatch noise (each rank draws its own batches)."""
    rng = random.Random(seed)
    return [scale * (0.4 + 1.9 * math.exp(-s / 40)) * math.exp(rng.gauss(0, 0.15)) for s in range(steps)]


def stream(per_rank: list[list[float]], every: int = 10) -> list[object]:
    size, steps = len(per_rank), len(per_rank[0])
    events: list[object] = [RunStart(source="golden", script="golden", rank=0, world_size=size)]
    for end in range(every - 1, steps, every):
        window = range(end - every + 1, end + 1)
        for rank, values in enumerate(per_rank):
            events.append(RankLoss(step=end, rank=rank, world_size=size, steps=tuple(window),
                                   values=tuple(values[s] for s in window)))
    events.append(RunEnd(steps=steps))
    return events


def timing(data_s: tuple[float, float], rest_s: tuple[float, float], wait_s: tuple[float, float]) -> list[object]:
    """Two ranks' step times on sampled steps 25, 50, ... 175 (24 timed steps each), with a
    little jitter: ``data_s`` in the DataLoader, ``rest_s`` the rest of their own work."""
    rng = random.Random(5)
    events: list[object] = [RunStart(source="golden", script="golden", rank=0, world_size=2)]
    for step in range(25, 200, 25):
        for rank in (0, 1):
            jitter = math.exp(rng.gauss(0, 0.1))
            events.append(RankTime(step=step, rank=rank, world_size=2, steps=24, wait_s=wait_s[rank],
                                   compute_s=(data_s[rank] + rest_s[rank]) * jitter, data_s=data_s[rank] * jitter))
    events.append(RunEnd(steps=200))
    return events


def write(name: str, events: list[object]) -> None:
    (GOLDEN / name).write_text("".join(dump_line(e) + "\n" for e in events), encoding="utf-8")  # type: ignore[arg-type]


def main() -> None:
    # Rank 1 trains on a corrupt shard: its loss runs 60% above rank 0's, with the same noise.
    write("rank_loss_skew.jsonl", stream([losses(120, seed=1), losses(120, seed=2, scale=1.6)]))
    # Two healthy ranks, 400 steps: their losses differ by batch noise only.
    write("healthy_rank_losses.jsonl", stream([losses(400, seed=3), losses(400, seed=4)]))
    # Rank 1 spends 20 ms a step in its DataLoader against 1 ms on rank 0; forwards alike.
    write("straggler_rank_data.jsonl", timing(data_s=(0.001, 0.020), rest_s=(0.010, 0.010), wait_s=(0.030, 0.010)))


if __name__ == "__main__":
    main()
