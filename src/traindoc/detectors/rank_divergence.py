"""rank-divergence: data-parallel replicas whose parameters differ at the same step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names, require
from traindoc.events import Event, RankParams
from traindoc.findings import Finding


class RankDivergence(Detector):
    """Compares each rank's parameter fingerprints (``RankParams``) with rank 0's at the same
    sampled step, tensor by tensor, by name; fires at the first step where a tensor differs
    beyond ``rtol`` (relative to the tensor's sum of magnitudes: replicas of a healthy job are
    bit-identical, the tolerance only absorbs a collective that rounds differently per rank).
    Tensors only one rank holds, sharded ones and those neither DDP nor the script keeps alike
    (``RankParams.unsynced``) are not compared. The steps are the job's: a rank that waited in
    a ``Join`` context for ranks with more inputs counts their steps, so ranks that took
    different numbers of steps are compared after the same number of updates."""

    id = "rank-divergence"
    needs = frozenset({"rank_params"})
    examples = (
        Example("zoo/ddp_raw_module_forward.py", 0),
        Example("zoo/ddp_ema_rank0.py", 0),
        Example("zoo/ddp_clip_one_rank.py", 0),
        Example("zoo/ddp_cast_after_wrap.py", 0),
        Example("zoo/ddp_manual_allreduce_lossy.py", 0),
        Example("zoo/tp_clip_local_norm.py", 0),
        Example("zoo/tp_sequence_parallel_local_clip.py", 0),
        Example("zoo/ddp_join_adam_per_epoch.py", 25),
        Example("zoo/healthy_ddp_ema.py", None),
        Example("zoo/healthy_fsdp2.py", None),
        Example("zoo/healthy_tensor_parallel.py", None),
        Example("zoo/healthy_tp_clip.py", None),
        Example("zoo/healthy_tp_sequence_parallel.py", None),
        Example("zoo/healthy_ddp_join_uneven.py", None),
        Example("golden/rank_divergence.jsonl", 3),
        Example("golden/healthy_ranks.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        rtol: float = 1e-6  # of the tensor's sum of |x| (or of the element's magnitude)

        def __post_init__(self) -> None:
            require(self, rtol="[0, 1)")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._by_step: dict[int, dict[int, RankParams]] = {}  # step -> rank -> fingerprint
        self._fired = False
        self._compared: set[tuple[int, int]] = set()  # (step, rank) compared with the reference
        self._steps = 0  # sampled steps compared on at least two ranks

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, RankParams)
        if self._fired:
            return
        ranks = self._by_step.setdefault(event.step, {})
        ranks[event.rank] = event
        ref_rank = min(ranks)
        ref = ranks[ref_rank]
        others = [r for r in sorted(ranks) if r != ref_rank and (event.step, r) not in self._compared]
        differing: dict[int, list[tuple[str, float]]] = {}
        for r in others:
            self._compared.add((event.step, r))
            diff = _differing(ref, ranks[r], self.config.rtol)
            if diff:
                differing[r] = diff
        if others and len(ranks) == 2:
            self._steps += 1
        if differing:
            self._fired = True
            yield self._finding(event.step, ref, differing)
        self._forget(event.step)

    def _forget(self, step: int) -> None:
        """Keep the few latest steps only: a slow rank delivers late, never a hundred steps late
        (the rank module drops what it could not deliver in time)."""
        for old in [s for s in self._by_step if s < step - 64]:
            del self._by_step[old]
            self._compared = {k for k in self._compared if k[0] != old}

    def _finding(self, step: int, ref: RankParams, differing: dict[int, list[tuple[str, float]]]) -> Finding:
        ranks = sorted(differing)
        first = differing[ranks[0]]
        tensors = [n for n, _ in first]
        worst_name, worst = max(first, key=lambda d: d[1])
        common = len(set(ref.names) & set(self._by_step[step][ranks[0]].names))
        sharded = f"; {ref.sharded} sharded tensor(s) were not compared" if ref.sharded else ""
        if ref.unsynced:
            sharded += (f"; {ref.unsynced} tensor(s) that neither DDP nor the script keeps alike across "
                        "ranks were not compared")
        return finding(
            self.id, step=step,
            message=(
                f"after step {step}, rank(s) {', '.join(map(str, ranks))} hold different values than "
                f"rank {ref.rank} in {len(tensors)} of {common} replicated tensor(s): {names(tensors)}. "
                f"Largest difference: {worst_name}, relative {fmt(worst)} (threshold {fmt(self.config.rtol)})"
                f"{sharded}."
            ),
            evidence={"ranks": ranks, "reference_rank": ref.rank, "world_size": ref.world_size,
                      "tensors": tensors[:50], "differing": len(tensors), "compared": common,
                      "relative_difference": worst, "sharded": ref.sharded, "unsynced": ref.unsynced,
                      "first_step": step},
            where=tensors[:10],
        )


def _differing(a: RankParams, b: RankParams, rtol: float) -> list[tuple[str, float]]:
    """(name, relative difference) of the tensors both fingerprints hold that differ: the sums
    relative to the sum of magnitudes, each sampled element relative to its own magnitude."""
    theirs = {n: i for i, n in enumerate(b.names)}
    ka, kb = len(a.samples) // max(len(a.names), 1), len(b.samples) // max(len(b.names), 1)
    out: list[tuple[str, float]] = []
    for i, name in enumerate(a.names):
        j = theirs.get(name)
        if j is None:
            continue
        scale = max(a.scales[i], b.scales[j], 1e-30)
        rel = _rel(a.sums[i], b.sums[j], scale)
        if ka == kb:
            for x, y in zip(a.samples[i * ka:(i + 1) * ka], b.samples[j * kb:(j + 1) * kb]):
                rel = max(rel, _rel(x, y, max(abs(x), abs(y), scale * 1e-12)))
        if rel > rtol:
            out.append((name, rel))
    return out


def _rel(x: float, y: float, scale: float) -> float:
    if x == y:  # also two equal infinities
        return 0.0
    if x != x or y != y:  # NaN on one side: a difference; on both: NaN's own detector speaks
        return 0.0 if x != x and y != y else float("inf")
    return abs(x - y) / scale
