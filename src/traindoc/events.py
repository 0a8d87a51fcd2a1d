"""The event vocabulary: the one language every source speaks and every detector reads.

Live hooks, log readers, checkpoint readers and preflight probes all *produce* these events;
detectors only *consume* them and never see hooks or file formats. The set is closed: a new
kind of observation is a new class here, registered in ``EVENT_TYPES``.

Every event names the ``signal`` it carries. A detector declares the signals it ``needs``; the
engine routes events by signal and reports a detector as not applicable when the stream never
carried one of its signals. ``Scalar`` events carry their own signal name (``loss``, ``lr``,
``grad_norm``, ``val_acc`` ...), so a log column and a live measurement are the same signal.

Steps are 0-based optimizer steps. ``None`` means "not known" (a checkpoint without a step).
All fields are JSON-friendly so a recorded stream can be replayed offline (``traindoc analyze``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Sequence, Union

# The signals a source may carry. Descriptions are used in "not applicable" reasons.
SIGNALS: dict[str, str] = {
    "loss": "the training loss per step",
    "backward": "the value handed to backward() (live only)",
    "params": "per-parameter gradient and update statistics on sampled steps",
    "optimizer": "the optimizers, their classes, parameter groups and LRs",
    "activations": "module outputs on sampled forward passes",
    "clip": "calls of clip_grad_norm_",
    "batch": "batches drawn from a DataLoader",
    "classification": "a cross-entropy loss (number of classes)",
    "cast": "casts of a model to a low-precision dtype",
    "lr": "the learning rate per step",
    "grad_norm": "the total gradient norm per step",
    "checkpoint": "a checkpoint file or folder (weights, training state)",
    "train_state": "a training checkpoint (optimizer, scheduler, step, RNG besides the weights), not bare weights",
    "bn": "BatchNorm running statistics (from a checkpoint or a model)",
    "loss_terms": "a loss made of several weighted terms, with each term's gradient norm (live, sampled steps)",
    "amp": "an AMP GradScaler in use: its scale, skipped steps, clips of still-scaled gradients (live)",
    "autocast": "the output dtypes of matmul-heavy modules in a mixed-precision run (live, sampled steps)",
    "save": "checkpoint files written by torch.save and renamed into place (live)",
    "load": "optimizer / LR scheduler load_state_dict calls, with the LRs before and after (live)",
    "scheduler": "LR scheduler step() calls and their order against the optimizer's first step (live)",
    "accumulation": "the backward() calls and gradient norms between optimizer steps (live, sampled steps)",
    "eval": "evaluation passes: forward passes under no_grad/inference_mode after a step (live)",
    "data_wait": "time spent waiting on the DataLoader per step (live)",
}


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


@dataclass(frozen=True)
class Optimizer:
    """An optimizer as first seen at its first step (and again when its groups change)."""

    step: int
    index: int
    cls: str  # class name, e.g. "AdamW"
    groups: tuple[ParamGroup, ...]
    signal: ClassVar[str] = "optimizer"


@dataclass(frozen=True)
class Scalar:
    """One number per step: the loss, the LR, a logged metric."""

    step: int
    name: str
    value: float

    @property
    def signal(self) -> str:  # type: ignore[override]
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
    def signal(self) -> str:  # type: ignore[override]
        return self.name

    def __len__(self) -> int:
        return len(self.steps)


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
class ParamStats:
    """One parameter held by an optimizer, measured on one sampled step.

    ``grad`` is the gradient L2 norm before the step; ``has_grad`` says whether the parameter
    had a gradient at all (None: unknown, as in a checkpoint diff). ``update`` is the
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
    update: float | None = None
    unchanged: float | None = None
    moved: float | None = None
    spacing: float | None = None  # the dtype's spacing at the typical |w| (for underflow)
    intended: float | None = None  # the optimizer's intended typical |update| per element
    optimizer: int = 0
    group: int = 0
    steps: int = 1
    signal: ClassVar[str] = "params"


@dataclass(frozen=True)
class Activation:
    """A module's output on a sampled forward pass.

    ``nan``: the output held NaN. ``dead``: for ReLU-like modules, the share of units that were
    never positive over all sampled batches so far (``batches`` of them). ``spread``: for the
    model's output, the mean over features of the standard deviation across the batch;
    ``scale`` the standard deviation of all its values; ``lo``/``hi`` its range.
    """

    step: int
    module: str
    type: str
    nan: bool = False
    dead: float | None = None
    units: int = 0
    batches: int = 0
    spread: float | None = None
    scale: float | None = None
    lo: float | None = None
    hi: float | None = None
    is_output: bool = False
    signal: ClassVar[str] = "activations"


@dataclass(frozen=True)
class Clip:
    """A clip_grad_norm_ call: the total norm before clipping and the max_norm asked for."""

    step: int
    norm: float
    max_norm: float
    where: str = ""
    signal: ClassVar[str] = "clip"


@dataclass(frozen=True)
class Batch:
    """A batch drawn from a DataLoader iterator. ``iterator`` numbers the iterators created
    (one per ``iter(loader)``), ``index`` is the batch's position within its iterator."""

    step: int
    loader: str
    iterator: int
    index: int
    fingerprint: str
    loader_len: int = -1
    signal: ClassVar[str] = "batch"


@dataclass(frozen=True)
class Classification:
    """A cross-entropy loss call: its number of classes and value."""

    step: int
    classes: int
    value: float
    fn: str = "cross_entropy"
    signal: ClassVar[str] = "classification"


@dataclass(frozen=True)
class Cast:
    """A model (or its parameters) cast to a dtype, with the user's call site."""

    module: str
    dtype: str
    where: str = ""
    signal: ClassVar[str] = "cast"


@dataclass(frozen=True)
class RunEnd:
    """Last event: how many optimizer steps ran and how the run ended."""

    steps: int
    duration_s: float = 0.0
    status: str = "ok"  # "ok", "exception", "exit", "interrupted"
    signal: ClassVar[str] = "end"



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

    @property
    def signal(self) -> str:  # type: ignore[override]
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
class LossTerm:
    """One term of a multi-term loss (``loss = w1 * term1 + w2 * term2 ...``) on a sampled step.

    ``weight`` is the scalar factor between the loss and the term found in the autograd graph
    (1.0 when there is none). ``grad`` is the L2 norm of the *weighted* term's gradient over the
    parameter tensors that at least two terms reach (``shared`` of the ``params`` tensors the
    loss reaches), ``grad_all`` over all of them; None when not measured. ``value`` is the
    weighted term's value when the term is a named tensor, else None. ``named`` says where the
    name comes from: "user" (``traindoc.loss_terms``), "variable" (a local variable of the
    user's code) or "op" (the autograd op, e.g. ``mse_loss``). ``terms`` counts the terms of
    this loss; ``where`` is the ``file:line`` of the backward() call.
    """

    step: int
    name: str
    weight: float
    grad: float | None = None
    grad_all: float | None = None
    value: float | None = None
    terms: int = 0
    shared: int = 0
    params: int = 0
    named: str = "op"
    where: str = ""
    signal: ClassVar[str] = "loss_terms"


@dataclass(frozen=True)
class GradScale:
    """An AMP GradScaler's ``update()`` (live): the scale it set and whether the optimizer step
    it closes was skipped (``scaler.step`` found Inf/NaN gradients and did not call
    ``optimizer.step()``). ``initial`` is the scaler's init_scale. On sampled skipped steps,
    ``nan``/``inf`` name the parameters whose gradients held NaN / Inf (empty when not
    measured). ``optimizer`` is the class stepped through the scaler, ``where`` the ``file:line``
    of ``scaler.step``."""

    step: int
    scale: float
    skipped: bool
    initial: float = 65536.0
    nan: tuple[str, ...] = ()
    inf: tuple[str, ...] = ()
    optimizer: str = ""
    where: str = ""
    signal: ClassVar[str] = "amp"


@dataclass(frozen=True)
class ScaledClip:
    """A gradient clip that ran on gradients still multiplied by an AMP GradScaler's scale
    (live): ``clip_grad_norm_``/``clip_grad_value_`` before ``scaler.unscale_(optimizer)``.
    ``max_norm`` is the max_norm (or clip_value) passed, ``norm`` the total norm the clip
    measured on the scaled gradients (None for clip_grad_value_), ``scale`` the scale."""

    step: int
    fn: str
    max_norm: float
    scale: float
    norm: float | None = None
    where: str = ""
    signal: ClassVar[str] = "amp"


@dataclass(frozen=True)
class AutocastCheck:
    """One sampled step of a mixed-precision run (an autocast region was active in a forward,
    or a GradScaler scaled the loss) (live): the matmul-heavy modules (Linear, Conv, attention,
    RNN) of its training forward passes. ``fp32`` names those whose outputs stayed float32 with
    float32 weights (``fp32_numel`` their parameters, of ``numel`` for all ``modules``).
    ``autocast`` lists the autocast regions seen active during the forward ("cpu:bfloat16"),
    ``scaler`` says a GradScaler was in use. ``reason`` for the fp32 modules: "outside" (no
    autocast active where they ran), "device" (autocast active for another device than theirs,
    ``device``), "thread" (they ran in another thread, where autocast state is not inherited)
    or "ignored" (autocast active for their device, but their op did not go through it)."""

    step: int
    autocast: tuple[str, ...]
    scaler: bool
    modules: int
    numel: int
    fp32: tuple[str, ...] = ()
    fp32_numel: int = 0
    device: str = ""
    reason: str = ""
    signal: ClassVar[str] = "autocast"


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


@dataclass(frozen=True)
class SchedulerStep:
    """An LR scheduler's first ``step()`` calls against its optimizer's first ``step()`` (live);
    one event per scheduler, sent when the optimizer first steps (or at the scheduler's first
    call when the optimizer already stepped). ``early``: calls made before the optimizer's first
    step; ``skipped``: of those, calls made after an AMP GradScaler skipped the optimizer's
    step (Inf/NaN gradients), which is not the user's ordering. LRs are parameter group 0's:
    ``lr_start`` just before the first early call (the schedule's first value), ``lr_after``
    just after the early calls, ``lr_first`` the LR the optimizer's first step used (NaN:
    unknown). ``where`` is the ``file:line`` of the first early call."""

    step: int
    scheduler: str
    optimizer: str
    early: int = 0
    skipped: int = 0
    lr_start: float = float("nan")
    lr_after: float = float("nan")
    lr_first: float = float("nan")
    where: str = ""
    signal: ClassVar[str] = "scheduler"


@dataclass(frozen=True)
class GradAccumulation:
    """How one optimizer's gradients were built between its previous ``step()`` and this one,
    on a sampled step (live). ``backwards``: backward() calls in between, ``batches``:
    DataLoader batches drawn in between. ``scale``: the constant factor the loss function's
    value was multiplied by before backward (1.0: handed over as computed; the largest over the
    calls; NaN: unknown). ``norms``: the optimizer's total gradient norm after each of those
    calls (at most 16); ``carried``: its norm just before the first of them (0.0: no
    gradients). ``cleared``: the gradients were None or all zero before at least one of them.
    ``interleaved``: another optimizer stepped between those calls (GAN-style alternation)."""

    step: int
    optimizer: int
    cls: str
    lr: float
    backwards: int
    batches: int
    scale: float
    norms: tuple[float, ...]
    carried: float
    cleared: bool
    interleaved: bool = False
    params: int = 0
    backward_where: str = ""
    where: str = ""  # file:line of the optimizer's step() call
    signal: ClassVar[str] = "accumulation"


@dataclass(frozen=True)
class EvalPass:
    """One evaluation phase (live): forward passes of a model under ``no_grad`` or
    ``inference_mode`` after an optimizer step, until training resumes. ``step`` is the last
    optimizer step before it; ``model`` its class, ``role`` "model" when an optimizer holds its
    parameters, "copy" otherwise (an EMA or averaged copy). ``duration_s``: wall time from
    entering its first no_grad region to leaving its last (traindoc's own re-run excluded);
    ``elapsed_s``: the run's wall time at its end. ``train_modules``: mode-dependent
    submodules (BatchNorm, Dropout ...) found in train mode at its first forward, as
    ``name (Type)``, of ``mode_modules``. ``rerun``: the largest difference between the first
    forward's output and a second forward on the same input, relative to the output's largest
    magnitude (NaN: not re-run); ``rerun_abs`` the absolute difference; ``first_diff`` the
    first module whose output differed (``name (Type)``, "" when not located). A phase that
    evaluates several models (the model, then its EMA) sends one event per model: ``index``
    counts them, and only the first (``index`` 0) carries the phase's ``duration_s``."""

    step: int
    model: str
    role: str
    duration_s: float
    elapsed_s: float
    train_modules: tuple[str, ...] = ()
    mode_modules: int = 0
    rerun: float = float("nan")
    rerun_abs: float = float("nan")
    first_diff: str = ""
    where: str = ""
    index: int = 0
    signal: ClassVar[str] = "eval"


@dataclass(frozen=True)
class LoaderWait:
    """Time the training loop waited on a DataLoader (live), over the ``steps`` steps since the
    previous event: the median per step of the wait (time in the iterator's ``__next__``) and
    of the step's wall time. Steps that start an iterator (worker start-up) are left out. The
    loader's settings: ``loader`` its dataset class, ``batch_size``, ``num_workers``,
    ``pin_memory``, ``prefetch_factor`` (0 without workers), ``persistent_workers``; ``device``
    the device type of the trained parameters ("cpu", "cuda", "" when unknown)."""

    step: int
    steps: int
    wait_s: float
    step_s: float
    loader: str = ""
    batch_size: int = 0
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int = 0
    persistent_workers: bool = False
    device: str = ""
    signal: ClassVar[str] = "data_wait"


Event = Union[
    RunStart, Optimizer, Scalar, Series, Backward, ParamStats, Activation, Clip, Batch,
    Classification, Cast, RunEnd, Checkpoint, BatchNormState, LossTerm,
    GradScale, ScaledClip, AutocastCheck, SaveFile, StateLoad,
    SchedulerStep, GradAccumulation, EvalPass, LoaderWait,
]

EVENT_TYPES: dict[str, type] = {
    "run_start": RunStart,
    "optimizer": Optimizer,
    "scalar": Scalar,
    "series": Series,
    "backward": Backward,
    "param_stats": ParamStats,
    "activation": Activation,
    "clip": Clip,
    "batch": Batch,
    "classification": Classification,
    "cast": Cast,
    "run_end": RunEnd,
    "checkpoint": Checkpoint,
    "batchnorm_state": BatchNormState,
    "loss_term": LossTerm,
    "grad_scale": GradScale,
    "scaled_clip": ScaledClip,
    "autocast_check": AutocastCheck,
    "save_file": SaveFile,
    "state_load": StateLoad,
    "scheduler_step": SchedulerStep,
    "grad_accumulation": GradAccumulation,
    "eval_pass": EvalPass,
    "loader_wait": LoaderWait,
}
_KIND_OF: dict[type, str] = {cls: kind for kind, cls in EVENT_TYPES.items()}


def to_dict(event: Event) -> dict[str, object]:
    """A JSON-ready dict with the event's kind first."""
    out: dict[str, object] = {"kind": _KIND_OF[type(event)]}
    if isinstance(event, Series):  # columns may be arrays: asdict would deep-copy them as-is
        out.update(name=event.name, steps=[int(x) for x in event.steps],
                   values=[float(x) for x in event.values])
        return out
    out.update(dataclasses.asdict(event))
    return out


def from_dict(data: dict[str, object]) -> Event:
    """Inverse of ``to_dict``. Raises ValueError on an unknown kind or bad fields."""
    kind = data.get("kind")
    cls = EVENT_TYPES.get(str(kind))
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, object] = {}
    for key, value in data.items():
        if key == "kind":
            continue
        if key not in fields:
            raise ValueError(f"event {kind!r} has no field {key!r}")
        if cls is Optimizer and key == "groups":
            value = tuple(ParamGroup(**_tupled(g)) for g in value)  # type: ignore[union-attr, arg-type]
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    try:
        return cls(**kwargs)  # type: ignore[no-any-return]
    except TypeError as exc:
        raise ValueError(f"bad {kind!r} event: {exc}") from None


def _tupled(d: dict[str, object]) -> dict[str, object]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


__all__ = [
    "SIGNALS", "Event", "EVENT_TYPES", "RunStart", "ParamGroup", "Optimizer", "Scalar", "Series",
    "Backward", "ParamStats", "Activation", "Clip", "Batch", "Classification", "Cast", "RunEnd",
    "Checkpoint", "BatchNormState", "LossTerm", "to_dict", "from_dict",
    "GradScale", "ScaledClip", "AutocastCheck", "SaveFile", "StateLoad",
    "SchedulerStep", "GradAccumulation", "EvalPass", "LoaderWait",
]
