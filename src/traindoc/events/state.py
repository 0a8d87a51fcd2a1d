"""Saved and restored training state: checkpoints, BatchNorm statistics, files, loads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint as read by ``traindoc ckpt`` (one per file or folder; two in a diff).

    ``training`` is True for a training checkpoint (weights plus an optimizer, a scheduler, a step
    or RNG state), False for bare weights (a state_dict, ``model.safetensors``); the signal is
    then ``checkpoint`` instead of ``train_state``, so detectors about resuming are reported as
    not applicable. ``has`` lists the parts present among model, optimizer, scheduler, scaler,
    step, rng, ema. ``lrs`` is the LR stored per parameter group (what ``load_state_dict``
    restores on resume), ``initial_lrs`` the groups' ``initial_lr`` (written by an LR scheduler;
    empty when no group has one), ``sched_base_lrs``/``sched_last_lrs`` the stored scheduler
    state's ``base_lrs``/``_last_lr``; each is flattened over optimizers (schedulers) in order.
    ``optimizer_steps`` is the optimizer's own step count (Adam's ``state[..]["step"]``).
    ``role`` is "old" or "new" in a diff, "" otherwise.
    """

    step: int | None
    path: str
    format: str  # "torch-dict", "state-dict", "safetensors", "hf-folder", "lightning", ...
    training: bool
    has: tuple[str, ...] = ()
    lrs: tuple[float, ...] = ()
    initial_lrs: tuple[float, ...] = ()
    max_lrs: tuple[float, ...] = ()  # OneCycleLR's per-group ``max_lr`` (the LR users configure)
    sched_base_lrs: tuple[float, ...] = ()
    sched_last_lrs: tuple[float, ...] = ()
    optimizer_steps: int | None = None
    epoch: float | None = None  # fractional for Hugging Face's trainer_state.json
    tensors: int = 0
    numel: int = 0
    nbytes: int = 0
    role: str = ""
    where: str = ""  # live: file:line of the torch.save call
    lost_buffers: tuple[str, ...] = ()  # BatchNorm modules saved with weights but no running stats
    meta: tuple[str, ...] = ()  # training metadata keys beside the weights (config, best_val_acc)

    @property
    def signal(self) -> str:
        return "train_state" if self.training else "checkpoint"

@dataclass(frozen=True)
class BatchNormState:
    """The running statistics of one BatchNorm module.

    ``mean_at_init``/``var_at_init``: ``running_mean`` is all 0 / ``running_var`` all 1, the
    values a fresh module starts with. ``affine_at_init``: weight all 1 and bias all 0 (None
    without affine parameters). ``changed``: the running statistics differ from those of an
    older checkpoint (None when there is none). ``role`` is "model", or "ema" for an EMA or
    averaged copy stored next to it. ``step`` is the checkpoint's step (None when unknown).
    """

    step: int | None
    module: str
    channels: int
    mean_at_init: bool
    var_at_init: bool
    num_batches_tracked: int | None = None
    affine_at_init: bool | None = None
    changed: bool | None = None
    role: str = "model"
    signal: ClassVar[str] = "bn"

@dataclass(frozen=True)
class SaveFile:
    """A checkpoint written by ``torch.save`` (``op`` "save") or one such file moved into place
    (``op`` "move": os.replace, os.rename, shutil.move, Path.rename/replace) (live). ``path``
    is the file written (save) or the destination (move), ``source`` the file moved.
    ``existed``: a file was already at ``path`` and the save overwrote it in place.
    ``training``: the object is a training checkpoint (optimizer, scheduler or step besides the
    weights), not bare weights."""

    step: int
    op: str
    path: str
    source: str = ""
    existed: bool = False
    training: bool = False
    where: str = ""
    signal: ClassVar[str] = "save"

@dataclass(frozen=True)
class StateLoad:
    """``load_state_dict`` of an optimizer or an LR scheduler (live): the LRs per parameter
    group just before and just after it. For an optimizer (``target`` "optimizer") ``before``/
    ``after`` hold each group's ``lr`` and ``initial_before``/``initial_after`` its
    ``initial_lr`` (written by an LR scheduler; empty unless every group has one); for a
    scheduler, its ``base_lrs``. ``path`` is the file the state was read from by torch.load
    ("" when unknown), ``where`` the ``file:line`` of the call."""

    step: int
    target: str
    cls: str
    before: tuple[float, ...]
    after: tuple[float, ...]
    initial_before: tuple[float, ...] = ()
    initial_after: tuple[float, ...] = ()
    path: str = ""
    where: str = ""
    signal: ClassVar[str] = "load"
