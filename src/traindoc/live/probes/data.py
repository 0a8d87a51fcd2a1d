"""Time spent waiting on the DataLoader, per training step.

``_BaseDataLoaderIter.__next__`` is timed on every batch (two clock reads); a step round's wall
time runs from one round's end to the next. Batches drawn with gradients disabled (an
evaluation loop under no_grad) are not training's and are left out, and so are rounds that
start an iterator (worker start-up at the beginning of an epoch, ``next(iter(loader))``) and,
unless every step is sampled, rounds with sampled work on either side (traindoc's own
measurements, which would make the step look longer and the wait's share smaller). Each
sampled step sends the median wait and median wall time of the rounds since the previous one,
with the training loader's settings. On the host: with asynchronous accelerator work the wall
time per step is still the loop's throughput, and a wait the host spends in ``__next__`` while
kernels are queued is counted as waiting (an upper bound).
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import torch
from torch.utils.data import dataloader as _dl

from traindoc.events import LoaderWait
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session


class DataProbes(Probe):
    name = "data"
    signals = ("data_wait",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._wait = 0.0  # this round's time in __next__ (training batches)
        self._batches = 0
        self._startup = False  # this round started an iterator
        self._last = time.perf_counter()
        self._waits: list[float] = []
        self._walls: list[float] = []
        self._settings: dict[str, Any] = {}

    def install(self) -> None:
        self._patch(_dl._BaseDataLoaderIter, "__next__", self._wrap_next)
        self._last = time.perf_counter()
        self._startup = True  # the first round includes the script's own set-up

    def uninstall(self) -> None:
        self.s.clock.unlisten_round(self._on_round)
        self._guard("data", self._emit, self.s.clock.step)

    def _wrap_next(self, orig: Any) -> Any:
        probes = self

        @functools.wraps(orig)
        def __next__(it: Any) -> Any:
            t0 = time.perf_counter()
            out = orig(it)
            dt = time.perf_counter() - t0
            if torch.is_grad_enabled():
                probes._wait += dt
                probes._batches += 1
                if getattr(it, "_num_yielded", 0) <= 1:
                    probes._startup = True
                    probes._guard("data", probes._note_loader, it)
            return out

        return __next__

    def _note_loader(self, it: Any) -> None:
        # Rounds are timed from a DataLoader's first batch on (a loop without one pays nothing);
        # the round it comes in is the loader's start-up, not timed.
        self.s.clock.listen_round(self._on_round)
        sampler = getattr(it, "_index_sampler", None)
        self._settings = dict(
            loader=type(getattr(it, "_dataset", it)).__name__,
            batch_size=int(getattr(sampler, "batch_size", 0) or 0),
            num_workers=int(getattr(it, "_num_workers", 0)),
            pin_memory=bool(getattr(it, "_pin_memory", False)),
            prefetch_factor=int(getattr(it, "_prefetch_factor", 0) or 0),
            persistent_workers=bool(getattr(it, "_persistent_workers", False)),
        )

    def _on_round(self, step: int) -> None:
        now = time.perf_counter()
        wall, self._last = now - self._last, now
        clock = self.s.clock
        ours = (clock.sampled or clock.next_sampled) and self.s.level.every > 1
        if self._batches and not self._startup and not ours:
            self._waits.append(self._wait)
            self._walls.append(wall)
        self._wait, self._batches, self._startup = 0.0, 0, False
        if self.s.clock.sampled and self._waits:
            self._guard("data", self._emit, step)

    def _emit(self, step: int) -> None:
        waits, walls = self._waits, self._walls
        self._waits, self._walls = [], []
        if not waits:
            return
        self.s.emit(LoaderWait(step=step, steps=len(waits), wait_s=statistics.median(waits),
                               step_s=statistics.median(walls), device=self._device(), **self._settings))

    def _device(self) -> str:
        for opt in self.s.optimizers():
            for group in opt.param_groups:
                for p in group["params"]:
                    return str(p.device.type)
        return ""
