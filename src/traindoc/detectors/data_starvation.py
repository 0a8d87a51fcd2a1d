"""data-starvation: the training loop waits on the DataLoader for much of each step."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import Thinned
from traindoc.events import Event, LoaderWait
from traindoc.findings import Finding


def _weighted_median(values: Thinned, weights: Thinned) -> float:
    """The median of ``values`` with each counted ``weights`` times (two Thinned samples fed in
    step, so that they keep the same positions)."""
    pairs = sorted(zip(values.values, weights.values))
    half = sum(w for _, w in pairs) / 2
    acc = 0.0
    for value, weight in pairs:
        acc += weight
        if acc >= half:
            return value
    return pairs[-1][0]


_CAP = 512  # events kept (each covers the steps since the previous one): exact below this


class DataStarvation(Detector):
    """Over at least ``min_steps`` training steps (iterator start-up steps left out, live), the
    median time per step spent in the DataLoader's ``__next__`` is ``share`` or more of the
    median step time and at least ``min_wait_s``: the loop, and the accelerator, wait for data.
    When the model trains on the CPU the bar is ``cpu_share``: there loading and compute share
    the same cores, and with a small model collating an in-memory batch alone is a third of a
    step (the toy runs of the zoo), which more workers would not make a starvation fix. Past 512
    measurements the medians are those of an even sample of them."""

    id = "data-starvation"
    needs = frozenset({"data_wait"})
    examples = (
        Example("zoo/data_starvation.py", -1),
        Example("zoo/healthy_mlp.py", None),
        Example("live/golden/data_starvation.jsonl", -1),
        Example("live/golden/healthy_eval.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        share: float = 0.3  # of the median step time (model on an accelerator)
        cpu_share: float = 0.5  # the same, when the model trains on the CPU
        min_wait_s: float = 0.01  # median wait per step
        min_steps: int = 20

        def __post_init__(self) -> None:
            require(self, share="(0, 1)", cpu_share="(0, 1)", min_steps=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        # Per event: the wait and the step time (medians over ``steps`` steps), and that weight;
        # bounded samples (the same events in each) however long the run.
        self._waits, self._walls, self._weights = Thinned(_CAP), Thinned(_CAP), Thinned(_CAP)
        self._steps = 0
        self._last: LoaderWait | None = None
        # The device of the latest event that names one: the live probe's last event (sent when
        # it stops, after the script's optimizers are gone) names none, and judging it with the
        # accelerator's bar would fire a CPU run at its last step on a share below the CPU's.
        self._device = ""
        self._fired_at: int | None = None

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, LoaderWait)
        e = event
        self._waits.append(e.wait_s)
        self._walls.append(e.step_s)
        self._weights.append(e.steps)
        self._steps += e.steps
        self._last = e
        if e.device:
            self._device = e.device
        if self._fired_at is None and self._starved():
            self._fired_at = e.step
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._fired_at is not None:
            yield self._finding()  # final evidence over the whole run

    def _threshold(self) -> float:
        return self.config.cpu_share if self._device == "cpu" else self.config.share

    def _starved(self) -> bool:
        cfg = self.config
        if self._steps < cfg.min_steps:
            return False
        wait, wall = _weighted_median(self._waits, self._weights), _weighted_median(self._walls, self._weights)
        return wall > 0 and wait >= cfg.min_wait_s and wait / wall >= self._threshold()

    def _finding(self) -> Finding:
        e = self._last
        assert e is not None
        wait, wall = _weighted_median(self._waits, self._weights), _weighted_median(self._walls, self._weights)
        share = wait / wall if wall > 0 else 0.0
        compute = max(wall - wait, 0.0)
        cpus = os.cpu_count() or 4
        workers = max(2, min(8, cpus // 2))
        prefetch = f", prefetch_factor={e.prefetch_factor}" if e.num_workers else ""
        settings = (f"DataLoader({e.loader}, batch_size={e.batch_size}, num_workers={e.num_workers}, "
                    f"pin_memory={e.pin_memory}{prefetch}, persistent_workers={e.persistent_workers})")
        if e.num_workers == 0:
            cause = (f"num_workers=0: every batch is loaded, transformed and collated in the training "
                     f"process ({e.loader}.__getitem__ and the collate function), between the steps.")
        else:
            cause = (f"{e.num_workers} worker(s) cannot produce batches as fast as the loop consumes "
                     "them: per-sample work (decoding, tokenization, Python augmentations) or slow storage.")
        return finding(
            self.id, step=self._fired_at,
            message=(
                f"the loop waited {fmt(wait * 1e3)} ms per step for the next batch, {share:.0%} of a "
                f"{fmt(wall * 1e3)} ms step (median over {self._steps} steps; threshold "
                f"{self._threshold():.0%}{' on CPU' if self._device == 'cpu' else ''} and "
                f"{fmt(self.config.min_wait_s * 1e3)} ms), with {settings}. "
                f"Overlapped with compute, a step would take about {fmt(max(compute, 1e-9) * 1e3)} ms."
            ),
            cause=cause + " The loss curve looks normal; the cost shows only as a slow run.",
            fix=(
                f"Load in parallel and ahead: DataLoader({e.loader}, batch_size={e.batch_size}, "
                f"num_workers={workers}, pin_memory=True, persistent_workers=True, prefetch_factor=4) "
                f"(this machine has {cpus} CPUs); move per-sample work out of the loop (pre-decode or "
                "pre-tokenize once, cache to memory-mapped arrays); with pinned memory copy with "
                "`.to(device, non_blocking=True)`."
            ),
            evidence={"wait_ms_per_step": wait * 1e3, "step_ms": wall * 1e3, "share": share,
                      "steps_measured": self._steps, "loader": e.loader, "batch_size": e.batch_size,
                      "num_workers": e.num_workers, "pin_memory": e.pin_memory,
                      "prefetch_factor": e.prefetch_factor, "persistent_workers": e.persistent_workers,
                      "threshold_share": self._threshold(), "device": self._device},
        )
