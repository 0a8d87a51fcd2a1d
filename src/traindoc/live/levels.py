"""The one cost dial (``--level``) and what each probe measures: which steps are sampled,
and which detectors a disabled probe leaves blind."""

from __future__ import annotations

from dataclasses import dataclass

from traindoc.events import SIGNALS


@dataclass(frozen=True)
class Level:
    """The one cost dial. Steps < ``dense`` are all sampled (most silent failures show at steps
    0-2), then every ``every``-th step. ``activations``: forward hooks on sampled steps."""

    dense: int
    every: int
    activations: bool

    def sampled(self, step: int) -> bool:
        return step < self.dense or step % self.every == 0


LEVELS: dict[str, Level] = {
    "cheap": Level(dense=4, every=100, activations=False),
    "standard": Level(dense=16, every=25, activations=True),
    "thorough": Level(dense=64, every=1, activations=True),
}


# What each probe measures: when one is disabled, the detectors reading these signals are blind.
PROBE_SIGNALS: dict[str, tuple[str, ...]] = {
    "params": ("params", "grad_norm", "optimizer"),
    "backward": ("backward", "loss"),
    "clip": ("clip", "grad_norm"),
    "forward": ("activations",),
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
    "order": ("eval_order",),
    "schedule": ("schedule",),
    "init": ("init",),
    "manual": ("params", "optimizer", "accumulation"),
    "freeze": ("freeze",),
    "decode": tuple(SIGNALS),  # reading measurements back: every measured signal
}


__all__ = ["LEVELS", "PROBE_SIGNALS", "Level"]
