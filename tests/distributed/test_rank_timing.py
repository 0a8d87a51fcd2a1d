"""The timing judgements of the cross-rank checks on replayed events (no torch, no clock): what
straggler-rank asks of a lag, and how the live side measures a rank's own work (collectives
and time queued for a CPU core left out, the job's step under Join)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from traindoc.analyze import analyze
from traindoc.events import RankTime

ID = "straggler-rank"


def windows(own: list[tuple[float, float]], wait: float = 0.004) -> list[RankTime]:
    """One window per (rank 0's, rank 1's) own work in seconds."""
    return [RankTime(step=25 * (i + 1), rank=r, world_size=2, compute_s=c, wait_s=wait, steps=23)
            for i, pair in enumerate(own) for r, c in enumerate(pair)]


@pytest.mark.parametrize("own,fires", [
    ([(0.002, 0.010)] * 5, True),  # 5x in every window
    ([(0.002, 0.0026)] * 5, False),  # slowest every time, by 1.3x: noise of a busy host, not a lag
    ([(0.002, 0.010)] * 2 + [(0.002, 0.0021)] * 3, False),  # lags in 2 windows of 5: not persistent
    ([(0.010, 0.002), (0.002, 0.010)] * 3, False),  # each rank lags in turn: not one-sided
    ([(0.002, 0.010)] * 4 + [(0.002, 0.0021)], True),  # 4 of 5 windows (share 0.8)
])
def test_a_straggler_is_a_persistent_one_sided_lag(own: list[tuple[float, float]], fires: bool) -> None:
    report = analyze(windows(own), select=[ID])
    assert (ID in {f.id for f in report.findings}) == fires


def test_the_cost_must_be_a_share_of_the_step() -> None:
    # 5x the other rank's own work, but 1 ms of a 200 ms step: below min_fraction.
    report = analyze(windows([(0.00025, 0.00125)] * 5, wait=0.2), select=[ID])
    assert report.findings == []


def test_the_finding_gives_the_time_left_out() -> None:
    events = [RankTime(step=25 * (i + 1), rank=r, world_size=2, compute_s=(0.002, 0.010)[r], wait_s=0.004,
                       steps=23, collective_s=0.003, queued_s=(0.0, 0.05)[r]) for i in range(3) for r in (0, 1)]
    (f,) = analyze(events, select=[ID]).findings
    assert f.evidence["slow_rank"] == 1 and f.evidence["queued_ms"] == pytest.approx(50)
    assert f.evidence["collective_ms"] == pytest.approx(3) and "queued for a CPU core left out" in f.message


def test_the_run_queue_clock_counts_time_waiting_for_a_core_only() -> None:
    from traindoc.live.rank_clock import RunQueue

    queue = RunQueue()
    t0, before = time.perf_counter(), queue.seconds()
    time.sleep(0.05)  # asleep, not queued: stays the rank's own time (storage, workers, the device)
    queued, wall = queue.seconds() - before, time.perf_counter() - t0
    assert 0 <= queued <= wall - 0.05 + 1e-3  # at most the wake-up's wait for a core, never the sleep
    queue.close()
    assert queue.seconds() == 0.0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.exists("/proc/thread-self/schedstat"),
                    reason="the run queue is read from Linux's schedstat")
def test_the_run_queue_clock_counts_the_time_a_busy_core_keeps_the_thread_waiting() -> None:
    from traindoc.live.rank_clock import RunQueue

    # This thread and a busy loop pinned to one core: the thread never sleeps, so all of its
    # wall time that is not its own CPU time is time queued for the core, and the busy loop
    # takes about half of it (more, on a machine loaded by others): what RunQueue must count.
    saved = os.sched_getaffinity(0)
    core = min(saved)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    queue = RunQueue()
    try:
        os.sched_setaffinity(busy.pid, {core})
        os.sched_setaffinity(0, {core})  # 0: the calling thread
        t0, cpu0, before = time.perf_counter(), time.thread_time(), queue.seconds()
        while time.thread_time() - cpu0 < 0.1:  # 100 ms of this thread's own CPU work
            pass
        queued, cpu, wall = queue.seconds() - before, time.thread_time() - cpu0, time.perf_counter() - t0
    finally:
        os.sched_setaffinity(0, saved)
        busy.kill()
        busy.wait()
        queue.close()
    assert queued >= 0.03  # the busy loop had the core for a fair share of these >= 100 ms
    assert 0.5 * (wall - cpu) <= queued <= wall - cpu + 1e-3
