"""Several ranks, one diagnosis: what each rank of a torch.distributed job tells rank 0.

Every rank observes itself (its own session, probes and detectors). On top of that, once the
script has joined a process group of two or more ranks:

- on each sampled step (at the end of the round, ``StepClock.listen_round``) each rank takes
  a fingerprint of its replicated parameters (``fingerprint``), its step time (with the part
  spent in the DataLoader iterator) and its own loss on each step since the previous sampled
  step, emits them into its own stream and publishes them in the job's rendezvous store;
- rank 0 reads what the others published so far on its own sampled steps and feeds it to its
  detectors (``rank-divergence``, ``straggler-rank``, ``rank-loss-skew``), so a finding fires
  within a sampled step;
- at the end each rank publishes how it ended (steps, status) and its own findings; rank 0
  waits for them (bounded), adds the other ranks' findings to its report, marks every finding
  with the ranks it concerns (``evidence["ranks"]``) and writes the one report of the job.

No collective is ever called: the exchange goes through the store the job already rendezvoused
with (key/value ``set``, ``add`` and ``multi_get`` of keys known to exist; the one blocking
call, rank 0's final ``wait``, has a timeout). So traindoc never changes the order of the job's
collectives, and a rank that crashes, stops early or takes fewer steps cannot hang another:
what it did not publish is missing from the report, which says so.

What is compared: the parameters DDP or the script keeps alike on every rank, and copies of
them (``live/replicas.py``). Buffers are not compared: DDP broadcasts them from rank 0 at each
forward and BatchNorm updates them from each rank's own batch right after, so replicas hold
different buffers between two forwards by design. Ranks that take different numbers of steps
(uneven inputs under DDP's ``Join`` context manager) are compared at the same step of the job:
a rank that waited in a ``Join`` for the others counts the steps they took meanwhile (the
iterations it shadowed) into the step its events carry, and takes its fingerprints when that
step of the job is a sampled one (``live/rank_clock.py``).

What is timed: a rank's own work per step (``RankTime.compute_s``) is its wall time from the
end of an optimizer step to the next ``backward()``, less the time inside collectives (a loss
all-reduced for logging waits there for the slowest rank) and less the time it was ready to run
but waited for a CPU core (``rank_clock.RunQueue``, Linux: on a loaded machine a rank
that shares its core with another process is slowed, not slow). What is left is the rank's own
work, however loaded the machine, including waits of its own (storage, DataLoader workers, the
accelerator).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from datetime import timedelta
from typing import Any, Mapping

import torch

from traindoc.engine import Report
from traindoc.events import Event, RankEnd, RankLoss, RankParams, RankTime, Scalar, from_dict, to_dict
from traindoc.findings import Finding
from traindoc.live.collectives import Collectives
from traindoc.live.objects import ObjectMap
from traindoc.live.rank_clock import JoinCounter, RunQueue
from traindoc.live.replicas import fingerprint, is_shard, synced_params
from traindoc.live.spawn import SpawnFollower

# How long rank 0 waits at the end for the other ranks to say how they ended (seconds).
TIMEOUT_ENV = "TRAINDOC_RANKS_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0


def world() -> tuple[int, int] | None:
    """(rank, world size) of this process's default group when it has two or more ranks."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    size = dist.get_world_size()
    return (dist.get_rank(), size) if size > 1 else None


def launched_ranks() -> int:
    """The world size a launcher (torchrun, SLURM via torchrun) announced in the environment."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


class Ranks:
    """The cross-rank part of one rank's session (see the module docstring), and the following
    of ``mp.spawn`` children when ``options`` (the watch's own) are given."""

    def __init__(self, session: Any, options: Mapping[str, Any] | None = None, recorder: Any = None) -> None:
        self.s = session
        self._spawn = SpawnFollower(options, recorder) if options is not None else None
        self._queue = RunQueue()
        self._collectives = Collectives(session, self._queue.seconds)
        self.rank = -1  # known once the script joined a group of two or more ranks
        self.size = 1
        self.backend = ""
        self._store: Any = None
        self._keep: Any = None  # the job's own store, kept alive while we read (see _connect)
        self._broken = ""
        self._published = 0  # fingerprints this rank published
        self._read: dict[int, int] = {}  # rank -> its fingerprints rank 0 has read
        # A round closes when the next backward() begins: [that moment, the optimizer step's
        # end] is backward + step (where DDP waits for the other ranks' gradients), [the step's
        # end, the next backward] is data loading + forward (this rank's own work). Each mark
        # is (wall time, time queued for a core, time inside collectives, the part of that
        # queued): see ``_mark``.
        self._round = self._mark()
        self._stepped: tuple[float, float, float, float] | None = None
        # (own work, backward + step, data, collectives, queued) of each timed step since the last sample
        self._times: list[tuple[float, float, float, float, float]] = []
        self._data = 0.0  # this round's time inside DataLoader iterators (training batches)
        self._losses: list[tuple[int, float]] = []  # (step of the job, this rank's loss) since the last sample
        self._joins = JoinCounter(session)  # steps the others took while this rank waited in a Join
        self._synced = ObjectMap()  # parameters the script all-reduces or broadcasts itself
        self._first_step = True
        self._handles: list[Any] = []

    # ---- wiring --------------------------------------------------------------------------------
    def install(self, patcher: Any) -> None:
        """``patcher``: the probes' (its op-level mode sees which tensors collectives take)."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.s.clock.listen_round(self._on_round)
        self.s.event_listeners.append(self._on_event)
        self._handles.append(register_optimizer_step_post_hook(self._on_step))
        self._wrap_loader(patcher)
        self._joins.install(patcher)
        self._collectives.install(patcher)
        if self._spawn is not None:
            self._spawn.install(patcher)

    def uninstall(self) -> None:
        self.s.clock.unlisten_round(self._on_round)
        if self._on_event in self.s.event_listeners:
            self.s.event_listeners.remove(self._on_event)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._collectives.uninstall()
        self._queue.close()

    def _on_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self._store is not None and self._stepped is None:
            self._stepped = self._mark()
        # Which parameters the script keeps alike itself: matched on the first step (a
        # broadcast of the initial weights) and on sampled ones (per-step gradient all-reduces),
        # while the gradients it all-reduced still exist.
        if self._first_step or self.s.clock.sampled:
            self._first_step = False
            try:
                synced_params(self.s, self._collectives.take_synced(), self._synced)
            except Exception as exc:
                self._disable(exc)
        else:
            self._collectives.synced.clear()

    def _on_event(self, event: Event) -> None:
        # The session emits every step's loss at the flush of a sampled step, before that
        # round's ``_on_round``: a window's losses are complete when it is published.
        if type(event) is Scalar and event.name == "loss" and self._store is not None and not self._broken:
            self._losses.append((self._joins.job_step(event.step), event.value))

    def _mark(self) -> tuple[float, float, float, float]:
        c = self._collectives
        c.between()
        return time.perf_counter(), self._queue.seconds(), c.spent, c.spent_queued

    def _wrap_loader(self, patcher: Any) -> None:
        """Time the training batches drawn from DataLoader iterators (two clock reads a batch),
        so that a slow rank's own work splits into waiting on its data and the rest."""
        from torch.utils.data import dataloader

        ranks = self

        def timed(original: Any) -> Any:
            def __next__(it: Any) -> Any:
                if ranks._store is None or not torch.is_grad_enabled():  # no group yet, or evaluation
                    return original(it)
                t0, q0 = time.perf_counter(), ranks._queue.seconds()
                try:
                    return original(it)
                finally:
                    ranks._data += max(time.perf_counter() - t0 - (ranks._queue.seconds() - q0), 0.0)

            return __next__

        patcher.patch(dataloader._BaseDataLoaderIter, "__next__", timed)

    # ---- each sampled step ---------------------------------------------------------------------
    def _on_round(self, step: int) -> None:
        # The job's step: this rank's own, or later when it waited in a Join for the others;
        # then it samples on the job's sampled steps, as the ranks that did not wait do. The
        # latest offset: a Join left in this round has already synchronised the parameters.
        job = step + self._joins.offset
        sampled = self.s.clock.sampled if job == step else self.s.level.sampled(job)
        if self._store is None:  # not in a group of several ranks (yet): nothing to time or keep
            if sampled and not self._broken:
                self._sampled(job)  # joins the exchange once the script has made its group
            self._round = self._mark()
            return
        now = self._mark()
        stepped = self._stepped
        # Only steps with no sampled work on either side are timed: a sampled step carries
        # traindoc's own measurements, which are nobody's training time.
        if not (self.s.clock.sampled or self.s.clock.next_sampled) and stepped is not None and not self._broken:
            wall, queued, collectives, queued_inside = (a - b for a, b in zip(now, stepped))
            queued -= queued_inside  # a wait for a core inside a collective is in its time already
            own = max(wall - queued - collectives, 0.0)
            # Backward + step, less the time queued for a core: the step time the straggler's
            # cost is weighed against does not grow with the machine's load either.
            wait = max(stepped[0] - self._round[0] - (stepped[1] - self._round[1]), 0.0)
            self._times.append((own, wait, min(self._data, own), collectives, queued))
        self._round, self._stepped, self._data = now, None, 0.0
        if self._broken or not sampled:
            return
        try:
            self._sampled(job)
        finally:
            self._round = self._mark()

    def _sampled(self, step: int) -> None:
        try:
            if self._store is None and not self._connect():
                return
            params = fingerprint(self.s, step, self.rank, self.size, self._synced)
            times, self._times = self._times, []

            def median(i: int) -> float:
                return statistics.median(t[i] for t in times) if times else 0.0

            timing = RankTime(step=step, rank=self.rank, world_size=self.size, steps=len(times),
                              compute_s=median(0), wait_s=median(1), data_s=median(2),
                              collective_s=median(3), queued_s=median(4))
            losses, self._losses = self._losses, []
            loss = RankLoss(step=step, rank=self.rank, world_size=self.size,
                            steps=tuple(s for s, _ in losses), values=tuple(v for _, v in losses))
            for event in (params, timing, loss):
                self.s.emit(event)
            self._publish(params, timing, loss)
            if self.rank == 0:
                self._collect()
        except Exception as exc:  # never let traindoc break the user's training
            self._disable(exc)

    def _connect(self) -> bool:
        joined = world()
        if joined is None:
            return False
        import torch.distributed as dist

        self.rank, self.size = joined
        self.backend = str(dist.get_backend())
        try:  # the job's store: keeps a store hosted by this process alive until we are done
            self._keep = dist.distributed_c10d._get_default_store()
        except Exception:  # a private torch function: absent in some version, then do without
            self._keep = None
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if host and port:  # our own client of the rendezvous store, with our own timeout
            base = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=30),
                                 wait_for_workers=False)
        elif self._keep is not None:
            base = self._keep
        else:
            raise RuntimeError("no rendezvous store found (no MASTER_ADDR/MASTER_PORT)")
        run = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        self._store = dist.PrefixStore(f"traindoc/{run}", base)
        self._store.add(f"n/{self.rank}", 0)  # the counter exists from now on (rank 0 checks it)
        return True

    def _publish(self, params: RankParams, timing: RankTime, loss: RankLoss) -> None:
        """One key per sampled step, then the counter: a reader that sees the count finds the key."""
        payload = json.dumps({"params": to_dict(params), "time": to_dict(timing), "loss": to_dict(loss)})
        self._store.set(f"fp/{self.rank}/{self._published}", payload)
        self._published += 1
        self._store.add(f"n/{self.rank}", 1)

    def _collect(self) -> None:
        """Rank 0: read what the other ranks published since the last call (no waiting: only
        keys that the counters say exist) and feed it to this rank's detectors."""
        counters = [f"n/{r}" for r in range(1, self.size)]
        if not self._store.check(counters):  # a rank that has not connected yet
            counters = [k for k in counters if self._store.check([k])]
        if not counters:
            return
        counts = [int(v) for v in self._store.multi_get(counters)]
        keys: list[str] = []
        for key, count in zip(counters, counts):
            r = int(key.split("/")[1])
            keys += [f"fp/{r}/{i}" for i in range(self._read.get(r, 0), count)]
            self._read[r] = count
        if not keys:
            return
        for key, raw in zip(keys, self._store.multi_get(keys)):
            data = json.loads(raw)
            for part in ("params", "time", "loss"):
                self.s.engine.feed(from_dict(data[part]))  # not recorded: it is the other rank's
            self._store.delete_key(key)

    # ---- the end -------------------------------------------------------------------------------
    def before_finish(self) -> None:
        """Rank 0: wait (bounded) for the other ranks to end, then read their last fingerprints."""
        self.uninstall()
        try:
            if self._store is None and not self._broken:
                self._connect()  # a rank that joined but never reached a sampled step
        except Exception as exc:
            self._disable(exc)
        if self._broken or self._store is None or self.rank != 0:
            return
        try:
            keys = [f"end/{r}" for r in range(1, self.size)]
            try:
                self._store.wait(keys, timedelta(seconds=_timeout()))
            except Exception:  # timed out: report without the ranks that did not end in time
                pass
            self._collect()
        except Exception as exc:
            self._disable(exc)

    def after_finish(self, report: Report, status: str) -> Report:
        """Other ranks: publish how this rank ended and what it found. Rank 0: merge the other
        ranks' ends and findings into the report (the one report of the job)."""
        if self._spawn is not None:
            child = self._spawn.report(report)
            if child is not None:  # the training ran in spawned children: theirs is the report
                return child
        if self._store is None:  # never joined a group of several ranks (or could not reach it)
            return report
        try:  # even when the checks were disabled: rank 0 is waiting for this rank's end
            steps = report.run.get("steps")
            end = RankEnd(rank=self.rank, world_size=self.size, steps=steps if isinstance(steps, int) else 0,
                          status=status, backend=self.backend)
            if self.rank != 0:
                payload = {"end": to_dict(end), "findings": [f.to_dict() for f in report.findings]}
                self._store.set(f"end/{self.rank}", json.dumps(payload, default=str))
                return report
            return self._merge(report, end)
        except Exception as exc:
            self._disable(exc)
            return report

    def _merge(self, report: Report, own: RankEnd) -> Report:
        from traindoc.analyze import merge_ranks
        ends: dict[int, RankEnd] = {0: own}
        found: dict[int, list[Finding]] = {0: list(report.findings)}
        for r in range(1, self.size):
            if not self._store.check([f"end/{r}"]):
                continue
            data = json.loads(self._store.get(f"end/{r}"))
            end = from_dict(data["end"])
            assert isinstance(end, RankEnd)
            ends[r] = end
            found[r] = [Finding.from_dict(d) for d in data["findings"]]
        return merge_ranks(report, ends, found, self.size)

    def _disable(self, exc: BaseException) -> None:
        self._broken = f"{type(exc).__name__}: {exc}"
        self.s.failed.setdefault("ranks", self._broken)
        sys.stderr.write(f"traindoc: internal error comparing ranks, disabled it: {exc}\n")


def _timeout() -> float:
    try:
        return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


__all__ = ["Ranks", "fingerprint", "is_shard", "launched_ranks", "world"]
