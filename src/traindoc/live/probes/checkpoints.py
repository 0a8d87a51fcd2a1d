"""The checkpoint probes: what the run saves, how it puts the file in place, what it resumes.

- ``torch.save`` (seen through the module-private steps of ``torch.serialization`` it takes:
  the file opened, the object pickled; ``torch.save`` itself stays torch's): the object is read
  the way ``traindoc ckpt`` reads a file (which of model / optimizer / scheduler / scaler /
  step / rng / ema it holds, the stored LRs), from
  references only: no tensor is copied or read. A checkpoint gives a ``Checkpoint`` event (the
  ckpt face's, so its detectors work live) and a ``SaveFile`` event (path, whether a file was
  already there, the user's file:line). A step counter under a name of the script's own
  (nanoGPT's ``iter_num``) is recognized by what it is: an integer equal to the optimizer's own
  step count or to the steps the run took, or one that grew since the run's previous save.
- ``os.replace`` / ``os.rename`` (which ``shutil.move`` and ``Path.rename``/``replace`` call):
  a file torch.save wrote being moved into place gives a ``SaveFile`` "move" event.
- ``torch.load`` (likewise: the file opened, the object unpickled) remembers which file each
  loaded object came from, so that
- ``Optimizer.load_state_dict`` / LR schedulers' ``load_state_dict`` can give a ``StateLoad``
  event: the LRs just before and just after the load, and the checkpoint path. It is sent when
  the load's LRs take effect: at the optimizer's next ``step()`` (or at the end of the run if
  it never steps again), and only if the LRs the load put into the param groups (or a loaded
  scheduler's ``base_lrs``) are still there. A script that sets the LR itself after loading
  (nanoGPT's ``param_group['lr'] = get_lr(iter_num)`` before every step) steps with its own
  LR, and the load's LRs steered nothing. "Still there" is identity: the float objects the
  load put in, so a script that writes the very value it loaded still counts as setting it.

Nothing here runs per training step, except one check in a step pre-hook once a load waits
for its optimizer's next step; everything of ours runs under ``patcher.guard``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

import torch
import torch.optim.lr_scheduler as lr_scheduler
from torch.optim.optimizer import register_optimizer_step_pre_hook

from traindoc.events import Checkpoint, SaveFile, StateLoad
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.objects import ObjectMap, user_site
from traindoc.live.session import Session

_RECENT_LOADS = 32
# torch.save and torch.load go through these (torch >= 1.6); without them no file is seen.
_SERIALIZATION = ("_open_zipfile_writer", "_open_file_like", "_save", "_legacy_save", "_load", "_legacy_load")
_LOAD_PARTS = ("_on_load", "_remember_lrs", "_on_optimizer_load", "_on_scheduler_load",
               "_on_step_after_load", "_flush_loads")
_MISSING = object()

# A load waiting for its optimizer's next step: its event, and whether its LRs are still in
# place (called with the optimizer).
_Waiting = tuple[StateLoad, Callable[[Any], bool]]


class _Opened(threading.local):
    """The file torch.serialization opened last in this thread, until the object is pickled
    into it (``save``: its path and whether a file was there) or unpickled from it (``load``)."""

    save: tuple[str, bool] | None = None
    load: str | None = None


class CheckpointProbes(Probe):
    name = "checkpoints"
    signals = ("save", "load", "checkpoint", "train_state")

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._saved: set[str] = set()  # files torch.save wrote (absolute paths)
        self._loads: list[tuple[int, str]] = []  # (id of a loaded object or its parts, path)
        self._file = _Opened()  # this thread's file torch.serialization just opened
        self._pending: Any = None
        self._in_sched_load = False
        self._waiting = ObjectMap()  # optimizer -> [_Waiting] loads not yet in effect
        self._step_hook: Any = None  # registered at the first load
        self._counters: dict[str, int] = {}  # step counter candidates of the last training save
        self._counted_at = -1  # the run's step at that save

    def _run(self, fn: Any, *args: Any) -> None:
        # Two parts that fail independently: what is saved, and what is loaded.
        part = "checkpoint-load" if fn.__name__ in _LOAD_PARTS else "checkpoint-save"
        self._patcher.guard(part, fn, *args)

    def install(self) -> None:
        patch, ser = self._patcher.patch, torch.serialization
        # torch.save and torch.load stay torch's own: their module-private steps are observed
        # (the file opened, then the object pickled or unpickled), so that a warning torch.load
        # issues with stacklevel=2 names the user's line and module, as without traindoc.
        if all(hasattr(ser, name) for name in _SERIALIZATION):
            patch(ser, "_open_zipfile_writer", self._wrap_open)
            patch(ser, "_open_file_like", self._wrap_open)
            for name in ("_save", "_legacy_save"):
                patch(ser, name, self._wrap_save)
            for name in ("_load", "_legacy_load"):
                patch(ser, name, self._wrap_load)
        patch(os, "replace", self._wrap_move)
        patch(os, "rename", self._wrap_move)
        patch(torch.optim.Optimizer, "load_state_dict", self._wrap_optimizer_load)
        for cls in _scheduler_classes():
            patch(cls, "load_state_dict", self._wrap_scheduler_load)

    def uninstall(self) -> None:
        self._run(self._flush_loads)  # loads whose optimizer never stepped again: in effect now
        if self._step_hook is not None:
            self._step_hook.remove()
            self._step_hook = None
        self._loads.clear()

    # ---- torch.save and moves ---------------------------------------------------------------
    def _wrap_open(self, orig: Any) -> Any:
        """``_open_zipfile_writer(f)`` (a save) and ``_open_file_like(f, mode)`` (a legacy save
        or a load): the path, and for a save whether a file was there before torch creates it."""
        probe = self

        @functools.wraps(orig)
        def opener(f: Any, *args: Any, **kwargs: Any) -> Any:
            probe._run(probe._opening, f, args[0] if args else kwargs.get("mode", "wb"))
            return orig(f, *args, **kwargs)

        return opener

    def _opening(self, f: Any, mode: str) -> None:
        path = _path_of(f)
        if "w" in mode:
            # A file object was opened (and created) by its owner: whether a file was there
            # before is not known, and the open one is no evidence of an overwrite.
            existed = isinstance(f, (str, os.PathLike)) and os.path.exists(path or "")
            self._file.save = None if path is None else (path, existed)
        else:
            self._file.load = path

    def _wrap_save(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def save(obj: Any, *args: Any, **kwargs: Any) -> Any:
            pending, probe._file.save = probe._file.save, None
            out = orig(obj, *args, **kwargs)
            if pending is not None:
                probe._run(probe._after_save, obj, *pending)
            return out

        return save

    def _after_save(self, obj: Any, path: str, existed: bool) -> None:
        s = self.s
        step, where = s.clock.current_step, user_site(1)
        ck = _checkpoint_event(obj, path, step)
        if ck is None and not isinstance(obj, torch.nn.Module):
            return  # not a checkpoint (a tensor, a list, metrics)
        self._saved.add(path)
        if ck is not None and ck.training and "optimizer" in ck.has:
            ck = self._counted(ck, obj, step)
        if ck is not None:
            s.emit(dataclasses.replace(ck, where=where))
        s.emit(SaveFile(step=step, op="save", path=path, existed=existed,
                        training=bool(ck is not None and ck.training), where=where))

    def _counted(self, ck: Checkpoint, obj: Any, step: int) -> Checkpoint:
        """A step counter recognized by growing since the run's previous training save (its
        first save had nothing to grow from: the detector reads a later save of the same file)."""
        from traindoc.sources.ckpt import read, steps

        now = steps.counters(obj)
        grew = step > self._counted_at and any(
            k in self._counters and v > self._counters[k] for k, v in now.items())
        self._counters, self._counted_at = now, step
        if not grew or "step" in ck.has:
            return ck
        has = set(ck.has) | {"step"}
        return dataclasses.replace(ck, has=tuple(p for p in read.PARTS if p in has))

    def _wrap_move(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def move(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(src, dst, *args, **kwargs)
            if probe._saved:  # the usual case for every other rename: one set lookup
                probe._run(probe._on_move, src, dst)
            return out

        return move

    def _on_move(self, src: Any, dst: Any) -> None:
        source, target = _path_of(src), _path_of(dst)
        if source is None or target is None or source not in self._saved:
            return
        self._saved.discard(source)
        self._saved.add(target)
        self.s.emit(SaveFile(step=self.s.clock.current_step, op="move", path=target, source=source,
                             where=user_site(1)))

    # ---- torch.load and load_state_dict -------------------------------------------------------
    def _wrap_load(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def load(*args: Any, **kwargs: Any) -> Any:
            path, probe._file.load = probe._file.load, None
            out = orig(*args, **kwargs)
            if path is not None:
                probe._run(probe._on_load, path, out)
            return out

        return load

    def _on_load(self, path: str, obj: Any) -> None:
        parts = [obj]
        if isinstance(obj, dict):
            for value in obj.values():
                parts.append(value)
                if isinstance(value, (list, tuple)):
                    parts.extend(value[:8])
        self._loads = (self._loads + [(id(p), path) for p in parts[:64]])[-_RECENT_LOADS * 4:]

    def _source(self, state_dict: Any) -> str:
        return next((path for oid, path in reversed(self._loads) if oid == id(state_dict)), "")

    def _wrap_optimizer_load(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def load_state_dict(opt: Any, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
            probe._pending = None
            probe._run(probe._remember_lrs, opt)
            before, probe._pending = probe._pending, None
            out = orig(opt, state_dict, *args, **kwargs)
            if before is not None:
                probe._run(probe._on_optimizer_load, opt, state_dict, before)
            return out

        return load_state_dict

    def _remember_lrs(self, opt: Any) -> None:
        self._pending = _group_lrs(opt.param_groups)

    def _on_optimizer_load(self, opt: Any, state_dict: Any, before: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
        lrs, initial = _group_lrs(opt.param_groups)
        event = StateLoad(
            step=self.s.clock.current_step, target="optimizer", cls=type(opt).__name__, before=before[0],
            after=lrs, initial_before=before[1], initial_after=initial, path=self._source(state_dict),
            where=user_site(1),
        )
        # The objects the load put in: a write by the script replaces them, even with an equal value.
        refs = [(g.get("lr", _MISSING), g.get("initial_lr", _MISSING)) for g in opt.param_groups]

        def kept(o: Any) -> bool:
            """Is some group's lr (or a scheduler's base, initial_lr) still the loaded one?"""
            groups = o.param_groups
            return len(groups) == len(refs) and any(
                g.get("lr", _MISSING) is lr or (init is not _MISSING and g.get("initial_lr", _MISSING) is init)
                for g, (lr, init) in zip(groups, refs))

        self._wait(opt, event, kept)

    def _wait(self, opt: Any, event: StateLoad, kept: Callable[[Any], bool]) -> None:
        """Send ``event`` at ``opt``'s next step() if ``kept(opt)`` says the load is in effect."""
        if self._step_hook is None:
            probe = self

            def hook(o: Any, args: Any, kwargs: Any) -> None:
                if probe._waiting:  # one check per step; empty once every load took effect
                    probe._run(probe._on_step_after_load, o)

            self._step_hook = register_optimizer_step_pre_hook(hook)
        waiting: list[_Waiting] = self._waiting.get(opt) or []
        self._waiting[opt] = waiting + [(event, kept)]

    def _on_step_after_load(self, opt: Any) -> None:
        for event, kept in self._waiting.pop(opt, None) or []:
            if kept(opt):
                self.s.emit(event)

    def _flush_loads(self) -> None:
        for opt, _ in self._waiting.items():
            self._on_step_after_load(opt)

    def _wrap_scheduler_load(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def load_state_dict(sched: Any, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
            if probe._in_sched_load:  # a subclass calling super(), or SequentialLR's children
                return orig(sched, state_dict, *args, **kwargs)
            before = _floats(getattr(sched, "base_lrs", ()))
            probe._in_sched_load = True
            try:
                out = orig(sched, state_dict, *args, **kwargs)
            finally:
                probe._in_sched_load = False
            probe._run(probe._on_scheduler_load, sched, state_dict, before)
            return out

        return load_state_dict

    def _on_scheduler_load(self, sched: Any, state_dict: Any, before: tuple[float, ...]) -> None:
        after = _floats(getattr(sched, "base_lrs", ()))
        if not before and not after:
            return
        event = StateLoad(
            step=self.s.clock.current_step, target="scheduler", cls=type(sched).__name__, before=before,
            after=after, path=self._source(state_dict), where=user_site(1),
        )
        opt = getattr(sched, "optimizer", None)
        if opt is None:
            self.s.emit(event)
            return
        ref = weakref.ref(sched)

        def kept(o: Any) -> bool:
            """Is the scheduler still alive, with the base_lrs it loaded?"""
            live = ref()
            return live is not None and _floats(getattr(live, "base_lrs", ())) == after

        self._wait(opt, event, kept)


def _path_of(f: Any) -> str | None:
    """The absolute path of a file argument, or of the file a file object has open (a
    temporary file written and then renamed: PyTorch-Ignite's ``DiskSaver``); None for buffers."""
    if not isinstance(f, (str, os.PathLike)):
        f = getattr(f, "name", None)  # io.BytesIO has none; a file opened from an fd, an int
    if isinstance(f, (str, os.PathLike)):
        p = os.fspath(f)
        return os.path.abspath(p) if isinstance(p, str) else None
    return None


def _floats(values: Any) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in values)
    except (TypeError, ValueError, RuntimeError):
        return ()


def _group_lrs(groups: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    lrs = _floats(g.get("lr", float("nan")) for g in groups)
    initial = _floats(g["initial_lr"] for g in groups) if groups and all("initial_lr" in g for g in groups) else ()
    return lrs, initial


def _scheduler_classes() -> list[type]:
    """LR scheduler classes that define their own load_state_dict (LambdaLR does not call super)."""
    out = []
    for value in vars(lr_scheduler).values():
        if isinstance(value, type) and issubclass(value, lr_scheduler.LRScheduler) and "load_state_dict" in vars(value):
            out.append(value)
    return out


def _checkpoint_event(obj: Any, path: str, step: int) -> Checkpoint | None:
    """The ckpt face's reading of an object about to be written (see ``checkpoint_of``)."""
    from traindoc.sources.ckpt.produce import checkpoint_of

    return checkpoint_of(obj, Path(path), step)
