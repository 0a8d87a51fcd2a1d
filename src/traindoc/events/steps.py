"""The run and its steps: what every source can tell (a log's columns, a live step's numbers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence


@dataclass(frozen=True)
class RunStart:
    """First event of every stream: who produced it and what it can observe."""

    source: str  # "live", "logs", "ckpt", "preflight"
    script: str = ""
    argv: tuple[str, ...] = ()
    python: str = ""
    torch: str = ""
    started: float = 0.0  # unix time
    rank: int = 0
    world_size: int = 1
    level: str = "standard"
    # The signals this stream can carry, when the source knows them up front (a log's
    # columns); empty when it does not (live). Lets the engine skip detectors that can't apply.
    signals: tuple[str, ...] = ()
    signal: ClassVar[str] = "run"

@dataclass(frozen=True)
class ParamGroup:
    index: int
    lr: float
    names: tuple[str, ...]
    dtypes: tuple[str, ...]  # one per parameter, e.g. "torch.bfloat16"
    numel: int
    weight_decay: float = 0.0
    momentum: float = 0.0  # SGD momentum or Adam beta1
    parallel: ClassVar[tuple[str, ...]] = ("names", "dtypes")  # one item per index each

@dataclass(frozen=True)
class Optimizer:
    """An optimizer as first seen at its first step (and again when its groups change, or once
    its step is seen to re-evaluate). ``reevaluates``: its step evaluated the closure it was
    handed more than once (a line search: LBFGS), so the step itself decides how far to move
    the parameters and when to stop."""

    step: int
    index: int
    cls: str  # class name, e.g. "AdamW"
    groups: tuple[ParamGroup, ...]
    reevaluates: bool = False
    signal: ClassVar[str] = "optimizer"

@dataclass(frozen=True)
class Scalar:
    """One number per step: the loss, the LR, a logged metric."""

    step: int
    name: str
    value: float

    @property
    def signal(self) -> str:
        return self.name

@dataclass(frozen=True)
class Series:
    """Many ``Scalar`` events of one signal at once: a log's column, ``values[i]`` at
    ``steps[i]`` (steps non-decreasing). Log readers hand the engine whole columns so that a
    million-row log is judged by vectorized detectors, not a million Python calls; to every
    other detector the engine replays the points as ``Scalar`` events in step order."""

    name: str
    steps: Sequence[int]
    values: Sequence[float]

    @property
    def signal(self) -> str:
        return self.name

    def __len__(self) -> int:
        return len(self.steps)

# How an optimizer's step() call ended (StepEnd.outcome).
STEPPED = "stepped"  # the optimizer ran and the step took effect
SKIPPED_BY_SCALER = "skipped_by_scaler"  # an AMP GradScaler found Inf/NaN gradients and skipped it
SKIPPED_BY_SCRIPT = "skipped_by_script"  # backward ran but the script never called step() this round
NO_GRADS = "no_grads"  # step() ran while no parameter it holds had a gradient
OUTCOMES = (STEPPED, SKIPPED_BY_SCALER, SKIPPED_BY_SCRIPT, NO_GRADS)


@dataclass(frozen=True)
class StepBegin:
    """A training step (one round: the backward passes and at most one ``step()`` per
    optimizer) begins. ``step`` is the round's index, the number every event of the round
    carries."""

    step: int
    signal: ClassVar[str] = "lifecycle"


@dataclass(frozen=True)
class StepEnd:
    """One optimizer's part of a step ended, with its ``outcome`` (``OUTCOMES``). ``optimizer``
    is the optimizer's index (-1 for a round in which no optimizer stepped); ``taken`` counts
    that optimizer's steps that took effect so far, this one included. Several optimizers (GANs,
    RL), LBFGS closures, accumulation and GradScaler-skipped steps are told apart by this event,
    not by heuristics in each detector."""

    step: int
    optimizer: int
    outcome: str
    taken: int = 0

    @property
    def signal(self) -> str:
        """A step that took effect is routine ("lifecycle", every step); any other outcome is
        "step_skipped", so a detector that only cares about skipped steps gets only those."""
        return "lifecycle" if self.outcome == STEPPED else "step_skipped"


@dataclass(frozen=True)
class Phase:
    """A new training phase begins at ``step``: a new optimizer after others have stepped (a
    teacher, then a student; pretraining, then fine-tuning), or a new model. Loss judgements
    start over at a phase boundary. ``index`` counts phases from 0."""

    step: int
    index: int
    reason: str
    signal: ClassVar[str] = "phase"


@dataclass(frozen=True)
class Backward:
    """A value handed to backward(). ``constant`` is True when it has no autograd history
    (a fresh tensor created with requires_grad=True): its gradient w.r.t. the model is zero."""

    step: int
    value: float
    constant: bool
    micro: int = 0  # index of this backward among those of the same optimizer step
    where: str = ""  # file:line of the backward() call in the user's code
    signal: ClassVar[str] = "backward"


@dataclass(frozen=True)
class Forwards:
    """How many times a model ran with gradients before the backward of ``step`` (counted on
    sampled steps, sent when it or ``rows`` changes): one per micro-batch in supervised
    training, an episode's length in a policy-gradient loop. ``rows``: the most samples one of
    those calls saw (1: one sample, an unbatched vector or a batch of one; 0: not known).
    ``bootstrap``: on the last 4 sampled steps or more, the model in train mode, or a copy of
    it (its parameter shapes: a target network) in either mode, also ran without gradients on
    a batch of the training batch's size, between the optimizer step and the backward: the step
    computes its targets with the model itself (a TD target, pseudo-labels of the same batch)."""

    step: int
    count: int
    rows: int = 0
    bootstrap: bool = False
    signal: ClassVar[str] = "forwards"

@dataclass(frozen=True)
class ParamStats:
    """One parameter held by an optimizer, measured on one sampled step.

    ``grad`` is the gradient L2 norm before the step; ``has_grad`` says whether the parameter
    had a gradient at all (None: unknown, as in a checkpoint diff); ``cleared`` that the step's
    backward gave it one and the script removed it before the step (``p.grad = None``: a layer
    frozen for a warm-up, as DINO's last layer in its first epoch). ``update`` is the
    relative update ||dw||/||w|| of this step, ``unchanged`` the share of (sampled) elements with
    a non-zero gradient that the step left bit-identical, ``moved`` the largest absolute change
    of the sampled elements since the parameter was first seen. ``steps`` > 1 when the numbers
    span several optimizer steps (a checkpoint diff).
    """

    step: int
    name: str
    dtype: str
    numel: int
    requires_grad: bool
    norm: float
    grad: float | None = None
    has_grad: bool | None = None
    cleared: bool = False
    update: float | None = None
    unchanged: float | None = None
    moved: float | None = None
    spacing: float | None = None  # the dtype's spacing at the typical |w| (for underflow)
    intended: float | None = None  # the optimizer's intended typical |update| per element
    lr: float | None = None  # the parameter group's LR at this step (None: unknown)
    optimizer: int = 0
    group: int = 0
    steps: int = 1
    signal: ClassVar[str] = "params"

REPLACED = "replaced before the loss"  # Activation.type: non-finite values the loss code replaced
# Activation.type: non-finite values a guard inside a model's forward replaced (module: the call)
REPLACED_INSIDE = "replaced inside the model"
# Activation.type prefix, "<ORIGIN> <op> at <file:line>": the op that made a non-finite value out
# of finite inputs, which a guard then replaced; module: the user's module running the op
ORIGIN = "first non-finite from"
# Activation.type prefix, "<LOSS_ORIGIN> <op> at <file:line>": the op that made a non-finite
# loss's NaN/Inf out of finite inputs on that step (nothing replaced it); module as ORIGIN's
LOSS_ORIGIN = "non-finite loss from"
LOSS_INPUT = "loss input"  # Activation.type: the probabilities a loss function sees


@dataclass(frozen=True)
class Activation:
    """A module's output on a sampled forward pass.

    ``nan``: the output held NaN; ``empty``: its input held no element (a loss over an empty
    selection, whose mean is NaN). ``dead``: for ReLU-like modules, the share of units that were
    never positive over a window of sampled batches (``batches`` of them, ``rows`` rows: samples,
    tokens or pixels; 0 where the source does not count them). ``spread``: for the
    model's output, the mean over features of the standard deviation across the batch;
    ``scale`` the standard deviation of all its values; ``lo``/``hi`` its range.
    """

    step: int
    module: str
    type: str
    nan: bool = False
    empty: bool = False
    dead: float | None = None
    units: int = 0
    batches: int = 0
    rows: int = 0
    spread: float | None = None
    scale: float | None = None
    lo: float | None = None
    hi: float | None = None
    is_output: bool = False
    signal: ClassVar[str] = "activations"

@dataclass(frozen=True)
class NormInput:
    """A normalization layer built with a large ``eps``, on a sampled training forward (live).
    ``var`` is what the layer divides by before ``eps`` is added: its input's variance (a
    BatchNorm's per channel, a LayerNorm's per row; an RMSNorm's mean square), the median over
    those. The layer's output has a standard deviation of sqrt(var / (var + eps)) instead of 1.
    ``where``: the file:line that built the layer ("" when it was built before watching began)."""

    step: int
    module: str
    cls: str
    eps: float
    var: float
    where: str = ""
    signal: ClassVar[str] = "norms"

@dataclass(frozen=True)
class TrainMode:
    """The train/eval mode of a trained model at a training forward of a sampled step (live): a
    forward with gradients on that a backward or an optimizer step followed. ``modules``: its
    submodules whose output depends on the mode (Dropout with p > 0, BatchNorm that tracks
    running statistics, stochastic depth); ``in_eval`` of them in eval mode, up to 4 ``names``
    of those as ``name (Type)``; ``root_eval``: the model itself is in eval mode
    (``model.eval()``, not a BatchNorm frozen alone). ``where``: the forward's call site when
    any is in eval mode."""

    step: int
    model: str
    modules: int
    in_eval: int
    root_eval: bool = False
    names: tuple[str, ...] = ()
    where: str = ""
    signal: ClassVar[str] = "train_mode"

@dataclass(frozen=True)
class Embeddings:
    """The embeddings a training loss compares by direction, on a sampled training step (live):
    the ``[N, D]`` batches handed to ``F.normalize`` or ``F.cosine_similarity``. ``spread`` is
    sqrt(1 - |mean of the unit rows|^2): 1 for directions spread evenly over the sphere, 0 for
    one direction shared by every row; the largest of the step's calls (the least collapsed),
    ``where`` that call's file:line, ``rows`` and ``dim`` its N and D."""

    step: int
    spread: float
    rows: int
    dim: int
    where: str = ""
    signal: ClassVar[str] = "embeddings"

@dataclass(frozen=True)
class SingleClass:
    """A sampled training step whose loss takes a softmax over a dimension of size 1 (live): a
    ``log_softmax`` inside ``cross_entropy`` or a ``softmax`` before a BCE, on the loss's side of
    every layer. Its output is exactly 1 (log: 0) whatever the model computes. ``op`` is
    ``softmax`` or ``log_softmax``, ``shape`` its input's shape and ``dim`` the dimension of
    size 1; ``taken_by`` the op that used it (``nll_loss``: a cross-entropy with class indices,
    ``mul``: one with probability targets), ``targets`` ``class indices``, ``floats`` or "";
    ``layer`` the parameter whose layer made the one-wide input and its shape (``fc.weight [1,
    64]``, "" when not found); ``alone``: the loss has no other term that reaches a trainable
    parameter; ``where`` the file:line of the backward."""

    step: int
    op: str
    shape: str
    dim: int
    taken_by: str = ""
    targets: str = ""
    layer: str = ""
    alone: bool = True
    where: str = ""
    signal: ClassVar[str] = "single_class"


@dataclass(frozen=True)
class LossOnProbabilities:
    """A sampled training step whose class-index loss takes probabilities (live): ``loss`` is
    ``cross_entropy`` (its log_softmax taken over a softmax's output) or ``nll_loss`` (a
    softmax's output where log-probabilities belong), on the loss's side of every layer.
    ``classes`` is the softmax's number of classes, ``shape`` its input's shape and ``dim`` its
    dimension; ``layer`` the parameter whose layer made the logits and its shape (``fc.weight
    [10, 64]``, "" when not found); ``where`` the file:line of the backward."""

    step: int
    loss: str
    classes: int
    shape: str
    dim: int
    layer: str = ""
    where: str = ""
    signal: ClassVar[str] = "loss_on_probabilities"

@dataclass(frozen=True)
class Clip:
    """A clipping: the total norm before clipping and the max_norm asked for. ``via``: what
    clipped, as the user wrote it (``clip_grad_norm_``, ``clip_grads_with_norm_``, FSDP's,
    DeepSpeed's ``gradient_clipping``)."""

    step: int
    norm: float
    max_norm: float
    where: str = ""
    via: str = "clip_grad_norm_"
    signal: ClassVar[str] = "clip"

@dataclass(frozen=True)
class Batch:
    """A batch drawn from a DataLoader iterator. ``iterator`` numbers the iterators created
    (one per ``iter(loader)``), ``index`` is the batch's position within its iterator.
    ``grad``: drawn with gradients enabled; ``micro``: the backward() calls of the step before
    it was drawn (two batches drawn at the same step and micro: the first was skipped, not
    trained on). ``sampler``: the sampler's class; ``order`` "shuffled", "fixed" or "" (unknown);
    ``order_key`` (first batch of an iterator, known samplers): equal keys mean the sampler
    draws the same order (DistributedSampler's seed and epoch, a RandomSampler's generator
    state); ``epoch``: a DistributedSampler's epoch (-1: none)."""

    step: int
    loader: str
    iterator: int
    index: int
    fingerprint: str
    loader_len: int = -1
    grad: bool = True
    micro: int = 0
    sampler: str = ""
    order: str = ""
    order_key: str = ""
    epoch: int = -1
    signal: ClassVar[str] = "batch"

@dataclass(frozen=True)
class Classification:
    """A cross-entropy loss call: its number of classes and value. ``scale``: the factor a
    one-element trainable tensor puts on its logits (CLIP's ``logit_scale.exp()``, 1 / a
    learnable temperature), None when none does (live: step 0 only)."""

    step: int
    classes: int
    value: float
    fn: str = "cross_entropy"
    scale: float | None = None
    signal: ClassVar[str] = "classification"

@dataclass(frozen=True)
class Cast:
    """A model (or its parameters) cast to a dtype, with the user's call site and ``via``, the
    installed package that made the call for the user (``lightning`` for
    ``precision="bf16-true"``; empty when the user's code cast it)."""

    module: str
    dtype: str
    where: str = ""
    via: str = ""
    signal: ClassVar[str] = "cast"

@dataclass(frozen=True)
class RunEnd:
    """Last event: how many steps ran and how the run ended. ``trained`` is False when a live
    run never trained (no backward, no optimizer step: an import error, a crash before the
    first step); ``exit_code`` is the script's own; ``optimizer_steps`` counts the optimizer
    steps that took effect, all optimizers together (None when the source cannot tell)."""

    steps: int
    duration_s: float = 0.0
    status: str = "ok"  # "ok", "exception", "exit", "interrupted", "stopped", "terminated", "hangup"
    trained: bool = True
    exit_code: int = 0
    optimizer_steps: int | None = None
    signal: ClassVar[str] = "end"
