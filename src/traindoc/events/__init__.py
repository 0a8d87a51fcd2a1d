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
import functools
import types
import typing
from typing import Any, Callable, Union, cast

# The classes live in small modules by theme; everyone imports them from here.
from traindoc.events.columns import plain, scalars
from traindoc.events.invariants import (
    BatchShape, EvalBeforeTrain, FreezeSkipped, InferenceForward, InitOverwritten, ScheduleEnd, UnsteppedModel,
)
from traindoc.events.loop import EvalPass, GradAccumulation, LoaderWait, LossTerm, SchedulerStep
from traindoc.events.precision import AutocastCheck, GradScale, ScaledClip
from traindoc.events.ranks import CollectiveInGraph, RankEnd, RankLoss, RankParams, RankTime
from traindoc.events.state import BatchNormState, Checkpoint, SaveFile, StateLoad
from traindoc.events.steps import (
    LOSS_INPUT, NO_GRADS, OUTCOMES, REPLACED, SKIPPED_BY_SCALER, SKIPPED_BY_SCRIPT, STEPPED, Activation, Backward,
    Batch, Cast, Classification, Clip, Embeddings, LossOnProbabilities, SingleClass, Forwards, NormInput, TrainMode, Optimizer, ParamGroup, ParamStats, Phase, RunEnd,
    RunStart, Scalar, Series, StepBegin, StepEnd,
)

# The signals a source may carry. Descriptions are used in "not applicable" reasons.
SIGNALS: dict[str, str] = {
    "loss": "the training loss per step",
    "backward": "the value handed to backward() (live only)",
    "forwards": "how many times the model ran with gradients before each backward, when that changes (live, sampled steps)",
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
    "lifecycle": "where each training step begins and how each optimizer step ended (stepped, skipped by a GradScaler, ...; live)",
    "step_skipped": "optimizer steps that did not take effect: skipped by a GradScaler or by the script, or run with no gradients (live)",
    "phase": "training phases: a new optimizer or model after training began (live)",
    "rank_params": "fingerprints of the replicated parameters of every rank on sampled steps (live, several ranks)",
    "rank_time": "each rank's compute and collective-wait time on sampled steps (live, several ranks)",
    "rank_end": "how many steps each rank took and how it ended (live, several ranks)",
    "rank_loss": "each rank's own training loss per step, compared across ranks (live, several ranks)",
    "batch_shape": "the samples drawn for each training batch and the batch dimension they were collated into (live, sampled steps)",
    "schedule": "LR schedulers with a known horizon and how many of its steps the run took (live, at the end)",
    "init": "parameters initialised several times while the model was built, the code that did it and the spread each left (live, from the script's start)",
    "freeze": "modules whose train() override freezes parameters but was never called before training (live)",
    "eval_order": "modules evaluated in eval mode before the training-mode forward their state needs (legacy spectral_norm; live)",
    "collective": "torch.distributed collectives called on tensors inside the autograd graph (live)",
    "inference_forward": "trainable modules run under torch.inference_mode() while a training step was built (live, sampled steps)",
    "train_mode": "how many of a trained model's Dropout/BatchNorm modules were in eval mode at its training forwards (live, sampled steps)",
    "norms": "the variance normalization layers built with a large eps divide by (live, sampled steps)",
    "embeddings": "how far apart the directions of the embeddings a loss normalizes or compares by cosine are (live, sampled steps)",
    "single_class": "a softmax over a dimension of size 1 on the loss's side of the model: one class (live, sampled steps)",
    "loss_on_probabilities": "a cross_entropy or nll_loss whose input a softmax over the classes made: probabilities where logits or log-probabilities belong (live, sampled steps)",
    "unstepped": "models that got gradients though no optimizer holds them, off the trained parameters' path: a target network or teacher run with autograd on (live, sampled steps)",
}


Event = Union[
    RunStart, Optimizer, Scalar, Series, Backward, Forwards, ParamStats, Activation, Clip, Batch,
    Classification, Cast, RunEnd, Checkpoint, BatchNormState, LossTerm,
    GradScale, ScaledClip, AutocastCheck, SaveFile, StateLoad,
    SchedulerStep, GradAccumulation, EvalPass, LoaderWait, StepBegin, StepEnd, Phase,
    RankParams, RankTime, RankEnd, RankLoss, CollectiveInGraph, EvalBeforeTrain, BatchShape, ScheduleEnd, InitOverwritten, FreezeSkipped,
    InferenceForward, UnsteppedModel, NormInput, TrainMode, Embeddings, SingleClass, LossOnProbabilities,
]

EVENT_TYPES: dict[str, type] = {
    "run_start": RunStart,
    "optimizer": Optimizer,
    "scalar": Scalar,
    "series": Series,
    "backward": Backward,
    "forwards": Forwards,
    "param_stats": ParamStats,
    "activation": Activation,
    "norm_input": NormInput,
    "train_mode": TrainMode,
    "embeddings": Embeddings,
    "single_class": SingleClass,
    "loss_on_probabilities": LossOnProbabilities,
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
    "step_begin": StepBegin,
    "step_end": StepEnd,
    "phase": Phase,
    "rank_params": RankParams,
    "rank_time": RankTime,
    "rank_end": RankEnd,
    "rank_loss": RankLoss,
    "collective_in_graph": CollectiveInGraph,
    "eval_before_train": EvalBeforeTrain,
    "batch_shape": BatchShape,
    "schedule_end": ScheduleEnd,
    "init_overwritten": InitOverwritten,
    "freeze_skipped": FreezeSkipped,
    "inference_forward": InferenceForward,
    "unstepped_model": UnsteppedModel,
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
    fields = {k: v for k, v in data.items() if k != "kind"}
    if cls is Optimizer and "groups" in fields:
        groups = fields["groups"]
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise ValueError(f"event {kind!r}: groups must be a list of objects")
        fields["groups"] = tuple(_build(ParamGroup, f"{kind} group", g) for g in groups)
    event: Event = _build(cls, kind, fields)
    return event


def _build(cls: type, kind: object, data: dict[str, object]) -> Any:
    """``cls(**data)``, each field of the type it declares (JSON lists as tuples)."""
    checks = _checks(cls)
    kwargs: dict[str, object] = {}
    for key, value in data.items():
        check = checks.get(key)
        if check is None:
            raise ValueError(f"event {kind!r} has no field {key!r}")
        if type(value) is list:
            value = tuple(value)
        if not check(value):
            raise ValueError(f"bad {kind!r} event: {key} is {value!r:.60}, not {_spoken(_hints(cls)[key])}")
        kwargs[key] = value
    sizes = {key: len(cast("tuple[object, ...]", kwargs.get(key, ()))) for key in getattr(cls, "parallel", ())}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"bad {kind!r} event: {', '.join(sizes)} must be as long as each other, not "
                         f"{', '.join(map(str, sizes.values()))} items")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad {kind!r} event: {exc}") from None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _checks(cls: type) -> dict[str, Callable[[object], bool]]:
    """Per field of ``cls``: is a value read from JSON of the type it declares? A stream is
    untrusted input: a string where a count belongs would reach the detectors' arithmetic."""
    return {f.name: _check(_hints(cls)[f.name]) for f in dataclasses.fields(cls)}


def _check(hint: Any) -> Callable[[object], bool]:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [_check(h) for h in typing.get_args(hint)]
        return lambda v: any(ok(v) for ok in options)
    if origin is tuple:
        item = _check(typing.get_args(hint)[0])
        return lambda v: type(v) is tuple and all(map(item, v))
    if hint is float:  # a float written as 1 reads back as an int: the same number
        return lambda v: type(v) is float or type(v) is int
    if hint in (int, str, bool, type(None)):
        return lambda v: type(v) is hint
    return lambda v: True  # ParamGroup (built above), a Series' columns (Sequence)


def _spoken(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


__all__ = [
    "SIGNALS", "Event", "EVENT_TYPES", "RunStart", "ParamGroup", "Optimizer", "Scalar", "Series",
    "Backward", "ParamStats", "Activation", "NormInput", "TrainMode", "Embeddings", "SingleClass", "LossOnProbabilities", "Clip", "Batch", "Classification", "Cast", "RunEnd",
    "Checkpoint", "BatchNormState", "LossTerm", "to_dict", "from_dict",
    "GradScale", "ScaledClip", "AutocastCheck", "SaveFile", "StateLoad",
    "SchedulerStep", "GradAccumulation", "EvalPass", "LoaderWait", "StepBegin", "StepEnd", "Phase",
    "RankParams", "RankTime", "RankEnd", "RankLoss", "CollectiveInGraph", "EvalBeforeTrain", "BatchShape", "ScheduleEnd", "InitOverwritten", "FreezeSkipped",
    "InferenceForward", "UnsteppedModel",
    "plain", "scalars", "LOSS_INPUT", "REPLACED", "STEPPED", "SKIPPED_BY_SCALER", "SKIPPED_BY_SCRIPT", "NO_GRADS", "OUTCOMES",
]
