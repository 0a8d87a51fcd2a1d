"""The one cost dial (``--level``) and what each probe measures: which steps are sampled,
and which detectors a disabled probe leaves blind."""

from __future__ import annotations

from dataclasses import dataclass

from traindoc.events import SIGNALS


@dataclass(frozen=True)
class Level:
    """The one cost dial. Steps < ``dense`` are all sampled (most silent failures show at steps
    0-2), then every ``every``-th step, and from step ``later`` on (when set) every
    ``later_every``-th: a long run's later steps pay for half as many sampled steps, and a
    failure that begins there is still seen within ``later_every`` steps, a small share of the
    steps the run has taken by then. ``activations``: forward hooks on sampled steps."""

    dense: int
    every: int
    activations: bool
    later: int | None = None
    later_every: int = 0

    def sampled(self, step: int) -> bool:
        if step < self.dense:
            return True
        if self.later is not None and step >= self.later:
            return step % self.later_every == 0
        return step % self.every == 0


LEVELS: dict[str, Level] = {
    "cheap": Level(dense=4, every=100, activations=False),
    # Every 25th step costs a small model's median step 2-4% more than every 50th
    # (benchmarks/overhead.py): denser where failures begin, sparser where a run spends its time.
    "standard": Level(dense=16, every=25, activations=True, later=1000, later_every=50),
    "thorough": Level(dense=64, every=1, activations=True),
}


# What each probe measures: when one is disabled, the detectors reading these signals are blind.
PROBE_SIGNALS: dict[str, tuple[str, ...]] = {
    "params": ("params", "grad_norm", "optimizer"),
    "backward": ("backward", "loss"),
    "clip": ("clip", "grad_norm"),
    "forward": ("activations", "train_mode"),
    "dataloader": ("batch", "batch_shape"),
    "cross_entropy": ("classification",),
    "cast": ("cast",),
    "accumulation": ("accumulation",),
    "scheduler": ("scheduler", "lr"),
    "lr": ("lr",),
    "loop": ("scheduler", "lr"),
    "amp": ("amp", "autocast"),
    "checkpoints": ("save", "load", "checkpoint", "train_state"),
    "eval": ("eval", "bn"),
    "data": ("data_wait",),
    "routers": ("expert_gini", "expert_entropy"),
    "loss_terms": ("loss_terms",),
    "masking": ("activations",),
    "embeddings": ("embeddings",),
    "loss_graph": ("single_class", "loss_on_probabilities"),
    "order": ("eval_order",),
    "schedule": ("schedule",),
    "init": ("init",),
    "manual": ("params", "optimizer", "accumulation"),
    "freeze": ("freeze",),
    "decode": tuple(SIGNALS),  # reading measurements back: every measured signal
}


__all__ = ["LEVELS", "PROBE_SIGNALS", "Level"]
