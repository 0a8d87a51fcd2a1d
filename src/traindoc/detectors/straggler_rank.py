"""straggler-rank: one rank's own work per step is far longer than the others'."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.events import Event, RankTime
from traindoc.findings import Finding


class StragglerRank(Detector):
    """``RankTime`` gives, per rank and sampled step, the median over the steps before it (steps
    free of traindoc's own sampled work) of the rank's own work (data loading and forward, less
    the time inside collectives and the time spent queued for a CPU core: what the rank itself
    does, however loaded the machine and whatever it waits for in a logging all-reduce) and of
    its backward and optimizer step, where DDP's all-reduce waits for the slowest rank. A window
    lags on a rank when that rank's own work is ``factor`` times the median of the others' in
    that window. Fires at the end of the run when the same rank lags in at least ``share`` of
    the windows every rank reported (at least ``min_windows``: persistent and one-sided, not
    the noise of a busy machine), its median own work exceeds the others' by ``factor`` and the
    excess is ``min_fraction`` of its step time. The cost is that excess: every other rank
    waits for it in each step's all-reduce. The excess splits into time inside the DataLoader
    iterator (``data_s``) and the rest of the rank's own work (forward, host work): the larger
    part names the cause, data or compute."""

    id = "straggler-rank"
    needs = frozenset({"rank_time"})
    examples = (
        Example("zoo/ddp_straggler_uneven.py", -1),
        Example("zoo/ddp_straggler_slow_data.py", -1),
        Example("zoo/healthy_ddp_ema.py", None),
        Example("zoo/healthy_ddp_shared_core.py", None),
        Example("golden/straggler_rank.jsonl", -1),
        Example("golden/straggler_rank_data.jsonl", -1),
        Example("golden/healthy_ranks.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        factor: float = 1.5  # slow rank's own work / the others'
        share: float = 0.8  # of the windows in which it was the slowest
        min_fraction: float = 0.1  # its excess, of its whole step time
        min_windows: int = 2

        def __post_init__(self) -> None:
            require(self, factor="> 1", share="[0.5, 1]", min_windows=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._windows: dict[int, dict[int, RankTime]] = {}
        self._size = 0

    def observe(self, event: Event) -> None:
        assert isinstance(event, RankTime)
        if event.steps > 0:
            self._windows.setdefault(event.step, {})[event.rank] = event
            self._size = max(self._size, event.world_size)

    def finish(self) -> Iterator[Finding]:
        full = {s: r for s, r in sorted(self._windows.items()) if len(r) == self._size and self._size > 1}
        c = self.config
        if len(full) < c.min_windows:
            return
        lagging = [_lagging(r, c.factor) for r in full.values()]
        if not any(r is not None for r in lagging):
            return
        rank = statistics.mode([r for r in lagging if r is not None])
        share = lagging.count(rank) / len(lagging)
        mine = statistics.median(r[rank].compute_s for r in full.values())
        theirs = statistics.median(t.compute_s for r in full.values() for t in r.values() if t.rank != rank)
        step_time = statistics.median(r[rank].compute_s + r[rank].wait_s for r in full.values())
        excess = mine - theirs
        if share < c.share or mine < c.factor * theirs or excess < c.min_fraction * step_time:
            return
        first = next(s for s, lag in zip(full, lagging) if lag == rank)
        timed = sum(r[rank].steps for r in full.values())
        waits = {str(r_): statistics.median(r[r_].wait_s for r in full.values()) for r_ in range(self._size)}
        data = statistics.median(r[rank].data_s for r in full.values())
        their_data = statistics.median(t.data_s for r in full.values() for t in r.values() if t.rank != rank)
        data_excess = max(data - their_data, 0.0)
        cause = "data" if data_excess >= excess / 2 else "compute"
        yield finding(
            self.id, step=first,
            message=(f"rank {rank} lagged in {share:.0%} of {len(full)} windows ({timed} timed "
                     f"steps): its data loading and forward took a median {fmt(mine * 1e3)} ms per step "
                     f"against {fmt(theirs * 1e3)} ms on the other ranks ({mine / max(theirs, 1e-12):.1f}x; "
                     f"threshold {fmt(c.factor)}x in {c.share:.0%} of windows; time in collectives and "
                     f"queued for a CPU core left out). The others wait about "
                     f"{fmt(excess * 1e3)} ms per step for it in the gradient all-reduce, "
                     f"{excess / step_time:.0%} of the {fmt(step_time * 1e3)} ms step. "
                     f"{_split(cause, data, their_data, mine - data, theirs - their_data)}"),
            cause=_CAUSES[cause], fix=_FIXES[cause],
            evidence={"ranks": [rank], "slow_rank": rank, "share": share, "windows": len(full),
                      "timed_steps": timed, "compute_ms": mine * 1e3, "others_compute_ms": theirs * 1e3,
                      "data_ms": data * 1e3, "others_data_ms": their_data * 1e3, "slow_part": cause,
                      "step_ms": step_time * 1e3, "cost_ms": excess * 1e3,
                      "wait_ms": {k: v * 1e3 for k, v in waits.items()},
                      "collective_ms": statistics.median(r[rank].collective_s for r in full.values()) * 1e3,
                      "queued_ms": statistics.median(r[rank].queued_s for r in full.values()) * 1e3},
        )


def _lagging(window: dict[int, RankTime], factor: float) -> int | None:
    """The rank whose own work in this window is ``factor`` times the median of the others'."""
    slow = max(window.values(), key=lambda t: t.compute_s)
    others = statistics.median(t.compute_s for t in window.values() if t.rank != slow.rank)
    return slow.rank if slow.compute_s >= factor * others and slow.compute_s > 0 else None


def _split(cause: str, data: float, their_data: float, rest: float, their_rest: float) -> str:
    """Which part of the slow rank's own work is slow: its time in the DataLoader iterator or
    the rest (forward and host work), each against the other ranks' median."""
    if data == their_data == 0:
        return "It is slow in its own compute: no rank spent measurable time in a DataLoader iterator."
    parts = (f"waiting on its DataLoader: {fmt(data * 1e3)} ms per step against {fmt(their_data * 1e3)} ms "
             f"on the other ranks; the rest of its own work: {fmt(rest * 1e3)} ms against {fmt(their_rest * 1e3)} ms")
    if cause == "data":
        return f"It is slow because of its data ({parts})."
    return f"It is slow in its own compute, not its data ({parts})."


_CAUSES = {
    "data": "The slow rank waits on its DataLoader: its shard is larger or slower to decode, its loader "
            "has fewer workers, or its workers share CPU cores or storage with another job.",
    "compute": "The slow rank's own work takes longer: it processes more data per step (uneven split), "
               "does extra work the others skip (logging, EMA, metrics on rank 0), or runs on a slower "
               "or shared device.",
}
_FIXES = {
    "data": "Balance the data per rank (the same number and size of samples each step) and give every "
            "rank the same loader settings (num_workers, pin_memory, persistent_workers) on its own cores; "
            "move decoding out of the loop or cache it.",
    "compute": "Give every rank the same work per step (DistributedSampler, bucketing by length), move "
               "rank-0-only work out of the step or do it on every rank, and check the device for throttling "
               "or other processes.",
}
