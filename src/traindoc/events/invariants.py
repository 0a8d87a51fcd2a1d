"""Invariants every healthy run keeps, whatever the model: the order of training events and
the attributes of what flows through the step (live)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class EvalBeforeTrain:
    """A module whose eval-mode output relies on state that only a training-mode forward
    computes ran in eval mode before any such forward: legacy ``nn.utils.spectral_norm``
    divides its weight by ``estimate``, the power-iteration estimate of its spectral norm,
    against ``actual``, the spectral norm measured (``state`` "spectral_norm"). ``where``: the
    user's call site of that forward."""

    step: int
    module: str
    state: str  # not "kind": a record's key for the event's class
    estimate: float
    actual: float
    where: str = ""
    signal: ClassVar[str] = "eval_order"


@dataclass(frozen=True)
class BatchShape:
    """A training batch as the DataLoader collated it (sampled steps): ``drawn`` samples the
    sampler drew for it (its ``batch_size``; 0 when unknown), the leading dimension of each of
    its first tensors (``dims``, shapes in ``shapes``), and whether it carries the keys of a
    packed batch (``position_ids``/``cu_seq_lens``: sequences concatenated on purpose).
    ``last``: the iterator's last batch (may be partial). ``collate``: the loader's collate
    function and where it is defined, when the batch looks collapsed."""

    step: int
    loader: str
    drawn: int
    dims: tuple[int, ...]
    shapes: tuple[str, ...]
    packed: bool = False
    last: bool = False
    collate: str = ""
    signal: ClassVar[str] = "batch_shape"


@dataclass(frozen=True)
class ScheduleEnd:
    """An LR scheduler with a known horizon, as the run left it (live, at the end): ``taken``
    of its ``horizon`` steps (read from ``attribute``: OneCycleLR's total_steps, a cosine's
    T_max, the num_training_steps of a warmup-decay lambda), group 0's LR now and its peak
    (``lr_peak``: the base or max LR). ``where``: the scheduler's construction site."""

    step: int
    scheduler: str
    optimizer: str
    taken: int
    horizon: int
    attribute: str
    lr_now: float
    lr_peak: float
    where: str = ""
    signal: ClassVar[str] = "schedule"


@dataclass(frozen=True)
class InitOverwritten:
    """A parameter initialised more than once by the user's (or a library's) code while the
    model was built (before the first optimizer step), whose last initialisation changed its
    spread: per initialisation in order, the code that ran it (``sites``), the standard
    deviation it left (``stds``), and how many parameters that code initialised in all
    (``counts``: a blanket init applied to every Linear vs a targeted one). torch's own default
    initialisation (``reset_parameters`` of torch.nn modules) is not listed."""

    step: int
    name: str
    sites: tuple[str, ...]
    stds: tuple[float, ...]
    counts: tuple[int, ...]
    signal: ClassVar[str] = "init"
    parallel: ClassVar[tuple[str, ...]] = ("sites", "stds", "counts")  # one item per index each


@dataclass(frozen=True)
class FreezeSkipped:
    """A module whose ``train()`` override freezes parameters (``requires_grad = False`` in
    the override or in a method it calls, e.g. mmcv's ``_freeze_stages``) had not had
    ``train()`` called when the first optimizer step ran: ``params`` are the parameters that
    override would freeze (found by running it on a copy of the module; empty when the module
    is too large to copy), which are trainable now. ``where``: the override's definition."""

    step: int
    module: str
    cls: str
    where: str
    params: tuple[str, ...] = ()
    signal: ClassVar[str] = "freeze"


@dataclass(frozen=True)
class InferenceForward:
    """Modules holding parameters an optimizer trains ran their forward inside a
    ``torch.inference_mode()`` region while the step was being built (live, sampled steps):
    their outputs are inference tensors with no autograd history, so nothing computed from
    them can give those parameters a gradient. ``step``: the optimizer step being built;
    ``params``: the trainable parameters of those modules (at most 64); ``modules``: the
    modules (``name (Type)``, at most 16); ``where``: file:line of the ``inference_mode``
    region (the ``with`` line, or the call of a function decorated with it)."""

    step: int
    params: tuple[str, ...]
    modules: tuple[str, ...]
    where: str
    signal: ClassVar[str] = "inference_forward"


@dataclass(frozen=True)
class UnsteppedModel:
    """A model ran forward in a training step with autograd on and its parameters got
    gradients, though no optimizer holds any of them and its output's graph reaches no
    parameter an optimizer holds: no trained parameter's gradient flows through it (a target
    network, a teacher). Live, sampled steps. ``model``: the user's name for it (``q_target``,
    ``self.teacher``; its class when none), ``cls`` its class; ``numel`` and ``params``: the
    elements and tensors that got gradients; ``grad``: the L2 norm of those gradients at this
    step; ``where``: the file:line of its first training call seen."""

    step: int
    model: str
    cls: str
    numel: int
    params: int
    grad: float
    where: str = ""
    signal: ClassVar[str] = "unstepped"
