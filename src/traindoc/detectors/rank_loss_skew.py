"""rank-loss-skew: one data-parallel rank's loss differs systematically from the others'."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import median
from traindoc.events import Event, RankLoss
from traindoc.findings import Finding

MAX_PENDING = 100_000  # steps some rank has not reported yet (about 10 MB)


class RankLossSkew(Detector):
    """Compares the ranks' own losses step by step (``RankLoss``: each rank's loss on every
    step, sent on sampled steps). Data-parallel ranks train one model on batches drawn from
    one distribution, so which rank has the highest loss at a step is chance: with two ranks a
    coin flip. Fires when, over the last ``window`` steps every rank reported (at least
    ``min_steps``), one rank's loss was above every other rank's (or below) on at least
    ``share`` of them and its median differs from the others' by at least ``min_effect`` of
    their median. The sign test needs no noise model: a healthy pair of ranks is on one side
    on 90% of 30 steps with probability below 1e-5, however noisy the batches."""

    id = "rank-loss-skew"
    needs = frozenset({"rank_loss"})
    examples = (
        Example("zoo/ddp_rank_mislabeled_shard.py", -1),
        Example("zoo/healthy_ddp_shards.py", None),
        Example("zoo/healthy_ddp_ema.py", None),
        Example("golden/rank_loss_skew.jsonl", 29),
        Example("golden/healthy_rank_losses.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        share: float = 0.9  # of the compared steps on which the rank is on one side of all others
        min_steps: int = 30
        min_effect: float = 0.1  # |its median - the others'| / |the others' median|
        window: int = 200  # compared steps judged (the latest): a skew that begins mid-run shows

        def __post_init__(self) -> None:
            require(self, share="(0.5, 1]", min_steps=">= 10", min_effect=">= 0")
            if self.window < self.min_steps:
                raise ValueError(f"window must be >= min_steps ({self.min_steps}), got {self.window}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._size = 0
        self._pending: dict[int, dict[int, float]] = {}  # step -> rank -> loss, until all ranks report
        # (step, {rank: loss}) of the latest steps every rank reported, all losses finite.
        self._compared: deque[tuple[int, dict[int, float]]] = deque(maxlen=self.config.window)
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, RankLoss)
        if self._fired or event.world_size < 2:
            return
        self._size = max(self._size, event.world_size)
        for step, value in zip(event.steps, event.values):
            row = self._pending.setdefault(step, {})
            row[event.rank] = value
            if len(row) == self._size:
                del self._pending[step]
                if all(math.isfinite(v) for v in row.values()):  # non-finite: nonfinite's matter
                    self._compared.append((step, row))
        self._forget()
        found = self._judge(event.step)
        if found is not None:
            self._fired = True
            yield found

    def _forget(self) -> None:
        """Steps wait until every rank reported them: offline, rank 0's whole stream comes
        before the others'. A rank that stopped reporting leaves steps that never complete:
        keep the latest ``MAX_PENDING`` of them."""
        if len(self._pending) > MAX_PENDING:
            for step in sorted(self._pending)[: len(self._pending) - MAX_PENDING // 2]:
                del self._pending[step]

    def _judge(self, at: int) -> Finding | None:
        c = self.config
        rows = list(self._compared)
        if len(rows) < c.min_steps:
            return None
        n = len(rows)
        # Above first: a rank trained on broken data usually has the higher loss, and with two
        # ranks either one is on one side of the other, so the report names that one.
        for side, sign in (("above", 1.0), ("below", -1.0)):
            for rank in range(self._size):
                count = sum(1 for _, r in rows if all(sign * (r[rank] - v) > 0 for k, v in r.items() if k != rank))
                if count < c.share * n:
                    continue
                mine = median([r[rank] for _, r in rows])
                theirs = median([median([v for k, v in r.items() if k != rank]) for _, r in rows])
                effect = (mine - theirs) / max(abs(theirs), 1e-12)
                if abs(effect) >= c.min_effect:
                    return self._finding(at, rank, side, count, rows, mine, theirs, effect)
        return None

    def _finding(self, at: int, rank: int, side: str, count: int, rows: list[tuple[int, dict[int, float]]],
                 mine: float, theirs: float, effect: float) -> Finding:
        c = self.config
        n, first, last = len(rows), rows[0][0], rows[-1][0]
        per_rank = {str(r): median([row[r] for _, row in rows]) for r in range(self._size)}
        others = "the other rank's" if self._size == 2 else "every other rank's"
        blame = ("this rank trains on something the others do not." if self._size > 2 else
                 "one of the two trains on something the other does not (the losses alone cannot "
                 "say which; the higher one usually marks it).")
        return finding(
            self.id, step=at,
            message=(f"rank {rank}'s loss was {side} {others} on {count} of {n} steps compared "
                     f"(steps {first}-{last}; {count / n:.0%}, threshold {c.share:.0%}): median {fmt(mine)} "
                     f"against {fmt(theirs)} on the other ranks ({effect:+.0%} of it, threshold "
                     f"{c.min_effect:.0%}). Ranks that draw batches from the same data sit on either side "
                     f"of each other at random; {blame}"),
            evidence={"ranks": [rank], "rank": rank, "side": side, "share": count / n, "steps_compared": n,
                      "first_step": first, "last_step": last, "rank_median": mine, "others_median": theirs,
                      "relative_difference": effect, "median_by_rank": per_rank},
        )
