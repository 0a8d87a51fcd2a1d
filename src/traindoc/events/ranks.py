"""Several processes training one model (torch.distributed): what one rank tells the others.

Each rank produces these about itself; in a live run rank 0 also receives the other ranks'
(through the job's rendezvous store, ``live/ranks.py``) and feeds them to its detectors, and
``traindoc analyze DIR`` merges them from the per-rank recordings. ``rank`` is the process's
rank in the job's default group, ``world_size`` the group's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class RankParams:
    """A fingerprint of the replicated parameters on one rank after step ``step`` (a sampled
    step of the job: the rank's own optimizer steps plus those the other ranks took while it
    waited in a ``Join`` context, so that ranks that took different numbers of steps are
    compared at the same point of the training): per tensor ``names[i]``, ``sums[i]`` the sum of its elements and ``scales[i]`` the
    sum of their magnitudes (accumulated in float32, float64 for float64 tensors), and
    ``samples[i * k:(i + 1) * k]`` ``k`` of its elements taken at an even stride, so that
    replicas with equal sums but different values still differ. ``sharded``: tensors left out
    because each rank holds a different shard (FSDP2 / tensor-parallel DTensors), compared
    nowhere; ``unsynced``: plain tensors left out because neither DDP nor the script keeps them
    alike across ranks (never all-reduced or broadcast: hand-written tensor-parallel shards, a
    model each rank trains alone)."""

    step: int
    rank: int
    world_size: int
    names: tuple[str, ...]
    sums: tuple[float, ...]
    scales: tuple[float, ...]
    samples: tuple[float, ...]
    sharded: int = 0
    unsynced: int = 0
    signal: ClassVar[str] = "rank_params"
    parallel: ClassVar[tuple[str, ...]] = ("names", "sums", "scales")  # one item per index each


@dataclass(frozen=True)
class RankTime:
    """Where one rank's time went over the ``steps`` steps before the sampled step ``step``
    (live; steps with no sampled work on either side, so that traindoc's own measurements are
    not counted): the median of ``compute_s``, from the end of an optimizer step to the next
    ``backward()`` (data loading and forward: the rank's own work, no DDP collective runs
    there), and of ``wait_s``, from that ``backward()`` to the end of the optimizer step (where
    DDP's gradient all-reduce waits for the slowest rank). ``data_s``: the median time, within
    ``compute_s``, spent inside the DataLoader iterator's ``__next__`` (0 without a DataLoader).
    ``compute_s`` and ``data_s`` leave out the time the rank spent inside collectives (a loss
    all-reduced for logging after the step waits for the slowest rank) and the time it was
    ready to run but waited for a CPU core (another process on a loaded machine), given as the
    medians ``collective_s`` and ``queued_s`` (Linux; 0 elsewhere); ``wait_s`` leaves out its
    own time queued for a core too. ``steps`` 0: none timed."""

    step: int
    rank: int
    world_size: int
    compute_s: float
    wait_s: float
    steps: int = 0
    data_s: float = 0.0
    collective_s: float = 0.0
    queued_s: float = 0.0
    signal: ClassVar[str] = "rank_time"


@dataclass(frozen=True)
class RankLoss:
    """One rank's training loss on each step it took since its previous ``RankLoss`` (live;
    ``steps[i]`` the optimizer step of ``values[i]``, the rank's own loss before any averaging
    across ranks), sent on sampled steps so that rank 0 compares the ranks' losses step by step."""

    step: int
    rank: int
    world_size: int
    steps: tuple[int, ...]
    values: tuple[float, ...]
    signal: ClassVar[str] = "rank_loss"
    parallel: ClassVar[tuple[str, ...]] = ("steps", "values")  # one item per index each


@dataclass(frozen=True)
class RankEnd:
    """One rank finished: the steps it took, how its script ended (``RunEnd.status``) and the
    job's torch.distributed backend ("" when the rank never joined a group)."""

    rank: int
    world_size: int
    steps: int
    status: str
    backend: str = ""
    signal: ClassVar[str] = "rank_end"


@dataclass(frozen=True)
class CollectiveInGraph:
    """A ``torch.distributed`` collective (``op``: all_reduce, all_gather, ...) was called on a
    tensor that requires grad while grad mode was on (live): the collective changes the value
    autograd sees but has no backward. ``tensor`` describes it (shape, dtype, the op that made
    it); ``where`` is the user's call site."""

    step: int
    op: str
    tensor: str
    where: str
    signal: ClassVar[str] = "collective"
