"""Checkpoints as events: the producer behind ``traindoc ckpt inspect`` and ``ckpt diff``.

``inspect`` emits one ``Checkpoint``, an ``Optimizer`` per stored optimizer state, a
``ParamStats`` per float tensor (its norm; spacing and the optimizer's intended update where
known) and a ``BatchNormState`` per BatchNorm module. ``diff`` emits the same for the newer
checkpoint, with each ``ParamStats`` carrying the movement between the two: ``update`` =
||new - old|| / ||old||, ``unchanged`` = share of elements bit-identical, ``moved`` =
max |new - old|, ``steps`` = optimizer steps between them (1 when unknown). The same detectors
that read live hooks read these. Tensors are processed one at a time, chunk by chunk.
"""

from __future__ import annotations

import dataclasses
import math
import platform
import re
import time
from pathlib import Path
from typing import Iterable, Sequence

from traindoc.errors import UsageError
from traindoc.events import BatchNormState, Checkpoint, Event, Optimizer, ParamGroup, ParamStats, RunEnd, RunStart
from traindoc.sources.ckpt import _optim
from traindoc.sources.ckpt._optim import Opt, Slot
from traindoc.sources.ckpt._tensors import Store, all_equal, diff_stats, stats
from traindoc.sources.ckpt.read import PARTS, TRAINING_PARTS, Ckpt, find_step, find_step_between, open_checkpoint
from traindoc.sources.ckpt.summary import DiffRow, DiffSummary, GroupRow, Summary, TensorRow
from traindoc.progress import Progress

LOW_PRECISION = ("bfloat16", "float16")
# The signals of the events above (a Checkpoint is "train_state" when it holds the training state),
# which the registry reads to say which detectors this face feeds.
SIGNALS: tuple[str, ...] = ("checkpoint", "train_state", "optimizer", "params", "bn", "end")


# --- inspect --------------------------------------------------------------------------------


def inspect(path: str | Path, *, trust: bool = False) -> tuple[list[Event], Summary]:
    """Read one checkpoint; return its events and the summary for the table."""
    ck = open_checkpoint(path, trust=trust)
    try:
        opts = [_optim.parse(sd, i) for i, sd in enumerate(ck.optimizers)]
        slots = _optim.map_names(opts, ck.model)
        find_step(ck, _opt_steps(opts))
        step = _step_of(ck, opts)
        summary = _summary(ck, opts, step)
        summary.notes += _stateless(opts, slots)
        events: list[Event] = [_run_start(str(ck.path)), _checkpoint_event(ck, opts, step, summary)]
        events += _optimizer_events(ck, opts, slots, step)
        for role, store in (("model", ck.model), ("ema", ck.ema)):
            if store is None:
                continue
            for name in store.names():
                row, event = _tensor(ck, store, name, role, opts, slots, step)
                summary.tensors.append(row)
                if event is not None:
                    events.append(event)
        bn = list(_bn_events(ck.model, None, step, "model")) + list(_bn_events(ck.ema, None, step, "ema"))
        events += bn
        summary.bn = _bn_counts(bn)
        events.append(RunEnd(steps=step or 0))
        return events, summary
    finally:
        ck.close()


def checkpoint_of(obj: object, path: Path, step: int) -> Checkpoint | None:
    """The Checkpoint event of an object a live run is about to write to ``path`` at
    ``step``, or None when it is not a training checkpoint (a bare tensor, not a state dict).
    Only references and tensor metadata are touched: nothing is copied or unpickled."""
    from traindoc.errors import UsageError
    from traindoc.sources.ckpt import read

    try:
        ck = read.from_object(obj, path, trust=False, mapped=False)
    except UsageError:
        return None
    if ck.format == "tensor":
        return None
    read.finish_reading(ck)
    opts = [_optim.parse(sd, i) for i, sd in enumerate(ck.optimizers)]
    read.find_step(ck, _opt_steps(opts), step)
    return _checkpoint_event(ck, opts, step, _summary(ck, opts, step))


def _tensor(ck: Ckpt, store: Store, name: str, role: str, opts: Sequence[Opt],
            slots: dict[str, Slot], step: int | None) -> tuple[TensorRow, ParamStats | None]:
    info = store.info(name)
    row = TensorRow(name=name, dtype=info.dtype, shape=info.shape, numel=info.numel,
                    nbytes=info.nbytes, role=role)
    if not info.is_float or info.numel == 0:
        return row, None
    st = stats(store, name)
    store.release(name)
    row.norm, row.nonfinite = st.norm, st.nonfinite
    label = name if role == "model" else f"{role}:{name}"
    param = role == "model" and _optim.is_param_like(name, info.dtype, info.shape)
    slot = slots.get(name) if param else None
    held = slot is not None or (param and not slots)  # without a mapping, assume it is trained
    event = ParamStats(
        step=step or 0, name=label, dtype="torch." + info.dtype, numel=info.numel,
        requires_grad=bool(ck.training and held), norm=st.norm,
        has_grad=_has_grad(opts, slot),
        spacing=_spacing(info.dtype, st.norm, info.numel) if param else None,
        intended=_intended(opts, slot, ck.mapped),
        optimizer=slot.optimizer if slot else 0, group=slot.group if slot else 0,
    )
    return row, event


# --- diff -----------------------------------------------------------------------------------


def diff(old_path: str | Path, new_path: str | Path, *, trust: bool = False) -> tuple[list[Event], DiffSummary]:
    """Compare two checkpoints of one model; return the events and the summary for the table."""
    old = open_checkpoint(old_path, trust=trust)
    try:
        new = open_checkpoint(new_path, trust=trust)
    except BaseException:
        old.close()
        raise
    try:
        return _diff(old, new)
    finally:
        old.close()
        new.close()


def _diff(old: Ckpt, new: Ckpt) -> tuple[list[Event], DiffSummary]:
    for ck in (old, new):
        if ck.model is None:
            raise UsageError(f"{ck.path} holds no model weights to compare; pass checkpoints with a "
                             "state_dict")
    assert old.model is not None and new.model is not None
    old_names, new_names = old.model.names(), new.model.names()
    old_set = set(old_names)
    common = [n for n in new_names if n in old_set]
    if not common:
        raise UsageError(
            f"{old.path} and {new.path} share no tensor names (e.g. {old_names[0]!r} vs "
            f"{new_names[0]!r}): they are different models, or one was saved with a prefix such "
            "as 'module.' (DDP) or 'model.'; diff two checkpoints of the same model"
        )
    old_opts = [_optim.parse(sd, i) for i, sd in enumerate(old.optimizers)]
    opts = [_optim.parse(sd, i) for i, sd in enumerate(new.optimizers)]
    slots = _optim.map_names(opts, new.model)
    find_step(old, _opt_steps(old_opts))
    find_step(new, _opt_steps(opts))
    find_step_between(old, new)
    old_step, step = _step_of(old, old_opts), _step_of(new, opts)
    result = DiffSummary(old=_summary(old, old_opts, old_step), new=_summary(new, opts, step), steps=None)
    result.steps = _steps_between(old, new, old_opts, opts, result.notes)
    result.notes += _stateless(opts, slots)
    n_steps = result.steps or 1
    events: list[Event] = [
        _run_start(f"{old.path} -> {new.path}"),
        _checkpoint_event(old, old_opts, old_step, result.old, role="old"),
        _checkpoint_event(new, opts, step, result.new, role="new"),
    ]
    events += _optimizer_events(new, opts, slots, step)
    progress = Progress("traindoc ckpt diff", len(new_names))
    for done, name in enumerate(new_names):
        progress.update(done, name)
        info = new.model.info(name)
        if name not in old_set:
            result.only_new.append(name)
            row, event = _tensor(new, new.model, name, "model", opts, slots, step)
            result.new.tensors.append(row)
            if event is not None:
                events.append(_norm_only(event))
            continue
        if old.model.info(name).shape != info.shape:
            result.reshaped.append(name)
            continue
        if not info.is_float or info.numel == 0:
            continue
        ds = diff_stats(old.model, new.model, name)
        old.model.release(name)
        new.model.release(name)
        param = _optim.is_param_like(name, info.dtype, info.shape)
        update = _relative(ds.delta_norm, ds.old_norm)
        result.rows.append(DiffRow(name=name, dtype=info.dtype, numel=info.numel, old_norm=ds.old_norm,
                                   new_norm=ds.new_norm, update=update, moved=ds.moved,
                                   unchanged=ds.unchanged, is_param=param))
        slot = slots.get(name) if param else None
        held = param and (slot is not None or not slots)
        event = ParamStats(
            step=step or 0, name=name, dtype="torch." + info.dtype, numel=info.numel,
            requires_grad=held, norm=ds.new_norm, has_grad=_has_grad(opts, slot),
            spacing=_spacing(info.dtype, ds.new_norm, info.numel) if param else None,
            intended=_intended(opts, slot, new.mapped),
            optimizer=slot.optimizer if slot else 0, group=slot.group if slot else 0,
        )
        if held and result.steps != 0:
            event = dataclasses.replace(event, update=update, unchanged=ds.unchanged, moved=ds.moved,
                                        steps=n_steps)
        events.append(event)
        result.old.tensors.append(TensorRow(name=name, dtype=old.model.info(name).dtype, shape=info.shape,
                                            numel=info.numel, nbytes=old.model.info(name).nbytes,
                                            norm=ds.old_norm))
        result.new.tensors.append(TensorRow(name=name, dtype=info.dtype, shape=info.shape, numel=info.numel,
                                            nbytes=info.nbytes, norm=ds.new_norm, nonfinite=ds.new_nonfinite))
    progress.close()
    new_set = set(new_names)
    result.only_old = [n for n in old_names if n not in new_set]
    bn = list(_bn_events(new.model, old.model, step, "model")) + list(
        _bn_events(new.ema, old.ema, step, "ema"))
    events += bn
    result.new.bn = _bn_counts(bn)
    events.append(RunEnd(steps=step or 0))
    return events, result


def _relative(delta: float, base: float) -> float | None:
    """||new - old|| / ||old||; 0 when nothing moved, None when OLD is all zeros (undefined)."""
    if delta == 0.0:
        return 0.0
    if base > 0 and math.isfinite(base):
        return delta / base
    return None


def _steps_between(old: Ckpt, new: Ckpt, old_opts: Sequence[Opt], opts: Sequence[Opt],
                   notes: list[str]) -> int | None:
    """Optimizer steps from OLD to NEW: the optimizers' own counts, else the saved steps."""
    pairs = []
    a, b = _opt_steps(old_opts), _opt_steps(opts)
    if a is not None and b is not None:
        pairs.append((a, b, "optimizer step counts"))
    if old.step is not None and new.step is not None:
        pairs.append((old.step, new.step, "saved steps"))
    if not pairs and b is not None and not old.optimizers:
        pairs.append((0, b, "optimizer step count of NEW (OLD has none: taken as step 0)"))
    for x, y, what in pairs:
        if y > x:
            if "taken as step 0" in what:
                notes.append(f"steps between taken from the {what}")
            return y - x
        if y < x:
            notes.append(f"NEW is older than OLD by its {what} ({y} < {x}); did you swap them? "
                         "Rates per step are not computed")
            return None
        notes.append(f"both checkpoints are at the same step by their {what} ({x}): nothing "
                     "trained between them, so movement is not judged")
        return 0
    notes.append("the steps between the checkpoints are unknown: changes are not divided per step")
    return None


def _norm_only(e: ParamStats) -> ParamStats:
    """A tensor that cannot be compared: keep its norm (for nonfinite), claim nothing else."""
    return dataclasses.replace(e, requires_grad=False, update=None, unchanged=None, moved=None,
                               has_grad=None)


# --- shared pieces --------------------------------------------------------------------------


def _run_start(script: str) -> RunStart:
    try:
        import torch

        tv = str(torch.__version__)  # a TorchVersion, a str subclass
    except ImportError:  # pragma: no cover
        tv = ""
    return RunStart(source="ckpt", script=script, python=platform.python_version(), torch=tv,
                    started=time.time())


def _step_of(ck: Ckpt, opts: Sequence[Opt]) -> int | None:
    return ck.step if ck.step is not None else _opt_steps(opts)


def _opt_steps(opts: Sequence[Opt]) -> int | None:
    steps = [o.steps for o in opts if o.steps is not None]
    return max(steps) if steps else None


def _missing(ck: Ckpt) -> list[str]:
    return [p for p in ("model",) + TRAINING_PARTS if p not in ck.has]


def _summary(ck: Ckpt, opts: Sequence[Opt], step: int | None) -> Summary:
    s = Summary(path=str(ck.path), format=ck.format, training=ck.training, step=step, epoch=ck.epoch,
                optimizer_steps=_opt_steps(opts), has=[p for p in PARTS if p in ck.has],
                missing=_missing(ck), file_bytes=ck.file_bytes, notes=list(ck.notes))
    for o in opts:
        for g in o.groups:
            dtypes = _optim.stored_dtypes(o, g, {}, None)
            kinds = sorted({d.removeprefix("torch.") for d in dtypes if d})
            s.groups.append(GroupRow(optimizer=o.index, cls=o.cls, group=g.index, lr=g.lr,
                                     initial_lr=g.initial_lr, params=len(g.params),
                                     dtypes=", ".join(kinds) or "no state yet"))
    s.sched_last_lrs = _sched(ck, "_last_lr")
    s.sched_base_lrs = _sched(ck, "base_lrs")
    lost = lost_buffers(ck.model) if ck.model is not None else []
    if lost:
        shown = ", ".join(lost[:4]) + (f" and {len(lost) - 4} more" if len(lost) > 4 else "")
        s.notes.append(f"BatchNorm modules {shown} hold weight and bias but no running_mean/running_var "
                       "(no buffer at all is saved): built from named_parameters(), not state_dict()?")
    return s


def _sched(ck: Ckpt, key: str) -> list[float]:
    out: list[float] = []
    for sd in ck.schedulers:
        values = sd.get(key)
        if isinstance(values, (list, tuple)):
            out.extend(_optim._num(v) for v in values)
    return out


def _checkpoint_event(ck: Ckpt, opts: Sequence[Opt], step: int | None, s: Summary, role: str = "") -> Checkpoint:
    groups = [g for o in opts for g in o.groups]
    initial = [g.initial_lr for g in groups]
    peaks = [_optim._num(g.raw["max_lr"]) for g in groups if "max_lr" in g.raw]
    return Checkpoint(
        step=step, path=str(ck.path), format=ck.format, training=ck.training,
        has=tuple(s.has), lrs=tuple(g.lr for g in groups),
        initial_lrs=tuple(x for x in initial if x is not None) if all(x is not None for x in initial) else (),
        max_lrs=tuple(peaks) if len(peaks) == len(groups) else (),
        sched_base_lrs=tuple(s.sched_base_lrs), sched_last_lrs=tuple(s.sched_last_lrs),
        optimizer_steps=s.optimizer_steps, epoch=ck.epoch,
        lost_buffers=tuple(lost_buffers(ck.model)) if ck.model else (),
        meta=tuple(ck.meta),
        tensors=len(ck.model.names()) if ck.model else 0,
        numel=sum(ck.model.info(n).numel for n in ck.model.names()) if ck.model else 0,
        nbytes=sum(ck.model.info(n).nbytes for n in ck.model.names()) if ck.model else 0,
        role=role,
    )


def _optimizer_events(ck: Ckpt, opts: Sequence[Opt], slots: dict[str, Slot], step: int | None) -> list[Optimizer]:
    out = []
    for o in opts:
        names = {s.pid: n for n, s in slots.items() if s.optimizer == o.index}
        groups = []
        for g in o.groups:
            dtypes = _optim.stored_dtypes(o, g, names, ck.model)
            numel = 0
            for pid in g.params:
                m = o.moment(pid)
                if m is not None:
                    numel += m.numel()
                elif pid in names and ck.model is not None:
                    numel += ck.model.info(names[pid]).numel
            groups.append(ParamGroup(
                index=g.index, lr=g.lr,
                names=tuple(g.names or [names.get(pid, f"param {pid}") for pid in g.params]),
                dtypes=dtypes, numel=numel, weight_decay=g.weight_decay, momentum=g.momentum,
            ))
        out.append(Optimizer(step=step or 0, index=o.index, cls=o.cls, groups=tuple(groups)))
    return out


def _stateless(opts: Sequence[Opt], slots: dict[str, Slot]) -> list[str]:
    """Parameters an optimizer holds but never made state for: they never got a gradient."""
    notes = []
    for o in opts:
        if not o.state or o.cls == "unknown":
            continue
        pids = [pid for g in o.groups for pid in g.params]
        missing = [pid for pid in pids if pid not in o.state]
        if missing:
            names = {s.pid: n for n, s in slots.items() if s.optimizer == o.index}
            shown = ", ".join(names.get(pid, f"#{pid}") for pid in missing[:6])
            notes.append(f"optimizer {o.index}: {len(missing)} of {len(pids)} parameters have no "
                         f"optimizer state, so they never received a gradient: {shown}"
                         + (" ..." if len(missing) > 6 else ""))
    return notes


def _has_grad(opts: Sequence[Opt], slot: Slot | None) -> bool | None:
    """False when the optimizer holds the parameter but never made state for it (torch optimizers
    create state on the first step where ``grad`` is not None) while it did for others."""
    if slot is None:
        return None
    opt = next(o for o in opts if o.index == slot.optimizer)
    if opt.state and slot.pid not in opt.state and opt.cls != "unknown":
        return False
    return None


def _intended(opts: Sequence[Opt], slot: Slot | None, mapped: bool) -> float | None:
    if slot is None:
        return None
    opt = next(o for o in opts if o.index == slot.optimizer)
    return _optim.intended_update(opt, slot, mapped=mapped)


def _spacing(dtype: str, norm: float, numel: int) -> float | None:
    """The dtype's spacing at the tensor's RMS magnitude (low-precision dtypes only)."""
    if dtype not in LOW_PRECISION or not numel or not math.isfinite(norm) or norm <= 0:
        return None
    eps = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}[dtype]
    return eps * 2.0 ** math.floor(math.log2(norm / math.sqrt(numel)))


def _bn_modules(store: Store) -> list[str]:
    names = set(store.names())
    return [n[: -len("running_mean")] for n in store.names()
            if n.endswith("running_mean") and n[: -len("running_mean")] + "running_var" in names]


_BN_NAME = re.compile(r"(?:^|_)(?:bn|batch_?norm)\d*(?:$|_)|^(?:bn|batch_?norm)", re.IGNORECASE)


def lost_buffers(store: Store) -> list[str]:
    """BatchNorm modules whose affine weight and bias were saved without their running
    statistics: a state built from ``named_parameters()`` (which holds no buffers) instead of
    ``state_dict()``. Told only where it can be: the module's name says BatchNorm (``bn1``,
    ``conv_bn``, ``batchnorm``) and the state holds no running statistics at all (a model with
    BatchNorm(track_running_stats=False) everywhere keeps none legitimately; it is rare)."""
    names = store.names()
    if any(n.endswith(("running_mean", "running_var", "num_batches_tracked")) for n in names):
        return []
    present = set(names)
    out = []
    for n in names:
        if not n.endswith(".weight"):
            continue
        prefix = n[: -len("weight")]
        leaf = prefix.rstrip(".").rsplit(".", 1)[-1]
        if _BN_NAME.search(leaf) and prefix + "bias" in present and len(store.info(n).shape) == 1:
            out.append(prefix.rstrip("."))
    return out


def _bn_events(store: Store | None, old: Store | None, step: int | None, role: str) -> Iterable[BatchNormState]:
    import torch

    if store is None:
        return
    old_names = set(old.names()) if old is not None else set()
    for prefix in _bn_modules(store):
        mean, var = store.get(prefix + "running_mean"), store.get(prefix + "running_var")
        nbt = None
        if prefix + "num_batches_tracked" in store:
            t = store.get(prefix + "num_batches_tracked")
            nbt = int(t.reshape(-1)[0]) if t.numel() else None
        affine = None
        if prefix + "weight" in store and prefix + "bias" in store:
            affine = all_equal(store.get(prefix + "weight"), 1.0) and all_equal(store.get(prefix + "bias"), 0.0)
        changed = None
        if old is not None and prefix + "running_mean" in old_names and prefix + "running_var" in old_names:
            om, ov = old.get(prefix + "running_mean"), old.get(prefix + "running_var")
            if om.shape == mean.shape and ov.shape == var.shape:
                changed = not (torch.equal(om, mean) and torch.equal(ov, var))
        module = prefix.rstrip(".")
        module = module[len("module."):] if module.startswith("module.") else module
        yield BatchNormState(
            step=step, module=module, channels=mean.numel(),
            mean_at_init=all_equal(mean, 0.0), var_at_init=all_equal(var, 1.0),
            num_batches_tracked=nbt, affine_at_init=affine, changed=changed, role=role,
        )


def _bn_counts(events: Sequence[BatchNormState]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for e in events:
        n, k = out.get(e.role, (0, 0))
        out[e.role] = (n + 1, k + (e.mean_at_init and e.var_at_init))
    return out
