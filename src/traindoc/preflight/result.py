"""What one preflight launch recorded, as plain values the probes read."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindoc.errors import UsageError
from traindoc.preflight.state import LossCall
from traindoc.sources.ckpt.read import open_checkpoint

REPEATED_SHARE = 0.9  # the share of steps that must see the repeated batch


@dataclass
class Snapshot:
    """The training state just before one optimizer step, reduced to comparable numbers."""

    weights: list[float]  # per parameter of the optimizers: sum of values
    moments: list[float]  # per optimizer state tensor: sum of values
    opt_steps: list[float]  # per parameter state: its 'step' counter
    lrs: list[float]
    schedulers: list[int]  # last_epoch of every LR scheduler
    scales: list[float]  # GradScaler scales
    rng: bytes  # torch's global RNG state
    py_rng: int  # hash of Python's and numpy's RNG states


@dataclass
class Result:
    """What one launch recorded."""

    steps: int = 0
    losses: list[float] = field(default_factory=list)  # per step: the sum of its backward losses
    fingerprints: list[tuple[float, ...]] = field(default_factory=list)  # per step: first model input
    snapshots: list[Snapshot] = field(default_factory=list)  # per step, before the step
    loss_call: LossCall | None = None
    grads: list[dict[str, tuple[bool, float, bool]]] = field(default_factory=list)  # per early step
    lrs: list[tuple[str, float]] = field(default_factory=list)  # (optimizer class, base lr) per group
    lr_options: dict[str, Any] = field(default_factory=dict)  # the first optimizer's other defaults
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)  # per parameter (by id): (numel, dim)
    framework: str = ""  # "transformers" or "lightning" when their trainer steps the optimizer
    saved: list[str] = field(default_factory=list)  # files torch.save wrote: in the sandbox, or absolute
    saved_at: int = 0  # the steps done when the first of them was written
    # files torch.load read: in the sandbox, or absolute ones a launch wrote; whether each absolute
    # one held an RNG state, read when it was loaded (preflight removes it after the launch)
    loaded: list[str] = field(default_factory=list)
    rng_outside: dict[str, bool | None] = field(default_factory=dict)
    sandbox: Path | None = None  # the launch's working folder (removed when preflight ends)
    status: str = "ok"  # ok, stopped, timeout, exit, error
    error: str = ""
    seconds: float = 0.0
    first_input: Any = None  # (root module, cloned args, cloned kwargs) of the first training forward
    report: Any = None  # the live report, for a launch run under traindoc.watch
    owner: Any = None  # the largest model in the script's frames holding the first module
    models: list[Any] = field(default_factory=list)  # the modules that ran forward with autograd on, first call first
    repeated: str = ""  # how the batch was repeated: "loader", "rng" or ""
    moved: float = math.nan  # share of parameter elements changed from step 0 to the end
    adversarial: int = 0  # > 1: this many optimizers stepped in one step, each after its own backward

    @property
    def repeat_start(self) -> int:
        """The first step that trains on the repeated batch. With the RNGs rewound after each
        step from step 1 on, step 1 may still train on a batch drawn before (a loop that draws
        the next batch before ``optimizer.step()``, as nanoGPT does): from step 2 on."""
        return 2 if self.repeated == "rng" else 0

    def batch_repeated(self) -> bool:
        """Did the steps from ``repeat_start`` on see the same model input? Nearly all of them
        must: an evaluation that draws its batches from the global RNG between two rewinds
        (nanoGPT's ``estimate_loss``) shifts the training batch of the one step after it."""
        prints = [p for p in self.fingerprints[self.repeat_start:] if p]
        if not self.repeated or not prints:
            return bool(self.repeated)
        return max(prints.count(p) for p in set(prints)) >= REPEATED_SHARE * len(prints)

    @property
    def first_module(self) -> Any:
        """The module of the first training forward; torch.compile's wrapper gives its own."""
        module = self.first_input[0] if self.first_input else None
        return getattr(module, "_orig_mod", module)

    def opposed(self) -> str:
        """Why the summed loss of a step is no objective to fit (a GAN's), or ""."""
        if not self.adversarial:
            return ""
        return (f"{self.adversarial} optimizers step in turn, each after a backward of its own loss (a GAN's "
                "generator and discriminator): their losses pull against each other, so their sum on one "
                "batch is not expected to fall")

    def holds_rng(self) -> bool | None:
        """Does the last checkpoint the script loaded hold an RNG state (read as ``traindoc
        ckpt`` reads it, no pickle run)? None when it cannot be read."""
        if not self.loaded or self.sandbox is None:
            return None
        last = self.loaded[-1]
        return self.rng_outside[last] if last in self.rng_outside else holds_rng(self.sandbox / last)


def holds_rng(path: Path) -> bool | None:
    """Does the checkpoint at ``path`` hold an RNG state? None when it cannot be read."""
    try:
        ck = open_checkpoint(path)
    except (UsageError, OSError):
        return None
    ck.close()
    return "rng" in ck.has
