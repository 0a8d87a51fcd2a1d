"""Two clocks of the cross-rank checks (``live/ranks.py``) that a loaded machine or uneven inputs
would otherwise fool.

- ``RunQueue``: the time a thread was ready to run but waited for a CPU core. A rank that
  shares its core with another process is slowed, not slow; its own work is its wall time
  less that wait. Sleeping, reading storage, waiting on DataLoader workers or the accelerator
  are not in the run queue: they stay the rank's own time.
- ``JoinCounter``: the steps of the job. Under DDP's ``Join`` context (uneven inputs) a rank
  that ran out of batches shadows the other ranks' iterations without stepping, and DDP then
  copies the final parameters onto it; from then on its own step counter lags the job's by
  the iterations it shadowed, and ranks are compared at the job's step.
"""

from __future__ import annotations

import os
import threading
from typing import Any


class RunQueue:
    """Seconds the calling thread has waited in the run queue, from
    ``/proc/thread-self/schedstat`` (Linux, one 1 us read); 0 elsewhere, and when read from
    another thread than the one that opened it (the file is the opener's)."""

    def __init__(self) -> None:
        self._fd = -1
        self._thread = -1
        self._tried = False

    def seconds(self) -> float:
        if not self._tried:
            self._tried = True
            try:
                self._fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
                self._thread = threading.get_native_id()
            except OSError:
                self._fd = -1
        if self._fd < 0 or threading.get_native_id() != self._thread:
            return 0.0
        try:
            return int(os.pread(self._fd, 64, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._tried = -1, True


class JoinCounter:
    """Counts the iterations this rank shadows in DDP's ``Join`` context: ``Join`` asks once
    per iteration how many ranks have not joined yet, and the last ask finds none. Each
    iteration is one step of the other ranks (one forward and backward; with gradient
    accumulation under ``no_sync`` it counts micro-batches)."""

    def __init__(self, session: Any) -> None:
        self.s = session
        # (first own step it applies to, offset): own step + offset = the job's step.
        self.offsets: list[tuple[int, int]] = [(0, 0)]

    @property
    def offset(self) -> int:
        """The latest offset: a Join left in the open round has already synchronised the
        parameters to the job's step ``own step + offset``."""
        return self.offsets[-1][1]

    def job_step(self, step: int) -> int:
        """The job's step of this rank's own step ``step`` (the offset in force when it ran)."""
        for first, offset in reversed(self.offsets):
            if step >= first:
                return step + offset
        return step

    def install(self, patcher: Any) -> None:
        """Through the probes' ``patcher``, which takes it down again."""
        try:
            from torch.distributed.algorithms.join import Join
        except Exception:  # a torch without it: nothing to count
            return
        if not hasattr(Join, "_get_num_nonjoined_procs"):  # a torch that counts otherwise
            return
        counter = self

        def counting(original: Any) -> Any:
            def __exit__(join: Any, *exc: Any) -> Any:
                asked = [0]
                ask = join._get_num_nonjoined_procs

                def counted() -> Any:
                    asked[0] += 1
                    return ask()

                join._get_num_nonjoined_procs = counted
                try:
                    return original(join, *exc)
                finally:
                    del join._get_num_nonjoined_procs
                    if asked[0] > 1:  # the last ask finds every rank joined: not an iteration
                        counter.offsets.append((counter.s.clock.current_step, counter.offset + asked[0] - 1))

            return __exit__

        patcher.patch(Join, "__exit__", counting)


__all__ = ["JoinCounter", "RunQueue"]
