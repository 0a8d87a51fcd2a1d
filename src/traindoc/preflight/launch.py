"""One launch of the user's script under preflight's control.

The script runs as with ``python script.py args`` (``runpy``, ``__name__ == "__main__"``,
``sys.argv``, ``sys.path[0]``), but with the working directory in a sandbox folder, so that the
checkpoints and logs it writes under relative paths land there, and with the global RNGs reset
to the state they had when preflight started, so that every launch draws the same numbers.
Our hooks record, per optimizer step: the loss handed to ``backward()``, a fingerprint of the
first model input, and a snapshot of the training state just before the step (weights, the
optimizer's moments, LRs, schedulers, GradScaler, RNGs). A launch ends after ``steps``
optimizer steps, after ``seconds``, or right after the script's first checkpoint (``stop_after_save``):
our hooks raise ``Stop``, a BaseException that a script's ``except Exception`` lets through.

Only the first optimizer the script steps counts steps (a GAN's second optimizer steps within
the same step). Everything torch-side is imported lazily by the caller's process: this module
is imported only once preflight runs.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import random
import runpy
import sys
import time
import weakref
from pathlib import Path
from typing import Any, Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import dataloader as _dl

from traindoc.live.entries import ENGINE_ENTRY
from traindoc.live.objects import frame_modules, largest_container
from traindoc.preflight import frames
from traindoc.preflight.files import Outside, inside
from traindoc.preflight.first_loss import FirstLoss
from traindoc.preflight.result import Result, Snapshot, holds_rng
from traindoc.preflight.sandbox import end_guard, guard_writes, own
from traindoc.preflight.state import RngState, clone, grad_table, numpy_rng_hash


class Stop(BaseException):
    """Raised by preflight's hooks to end a launch (never an error of the script)."""


GRAD_STEPS = 3  # early steps whose gradients are kept for the gradient probe
DIVERGED = 4.0  # an LR-sweep launch ends once its loss is non-finite or above this many times its first


class Launch:
    def __init__(self, script: Path, argv: list[str], sandbox: Path, *, steps: int, seconds: float,
                 rng: RngState, stop_after_save: bool = False, repeat_batch: bool = False,
                 snapshots: bool = False, keep_input: bool = False, watch: Any = None,
                 after_save: int = 0, outside: Outside | None = None, stop_below: float = 0.0,
                 lr_sweep: float = 0.0) -> None:
        self.script, self.argv, self.sandbox = script, argv, sandbox
        self.max_steps, self.seconds, self.rng = steps, seconds, rng
        self.stop_after_save, self.repeat_batch = stop_after_save, repeat_batch
        self.want_snapshots, self.keep_input = snapshots, keep_input
        self.watch = watch  # a traindoc.watch.Watch: the live probes observe this launch
        # > 0: once the script saved a checkpoint at step K, end at step K + after_save instead
        self.after_save = after_save
        self.outside = outside or Outside(sandbox / ".traindoc-backup")
        # > 0: with a repeated batch, end once the loss fell to this share of its first value
        self.stop_below = stop_below
        # > 0: every optimizer step runs at a constant LR, this times the group's base LR (its
        # schedule's ``initial_lr``, else the LR it was built with); the script's LR is put back
        # after the step, so its schedule and its own LR writes go on as usual
        self.lr_sweep = lr_sweep
        self._lrs: dict[int, list[Any]] = {}
        self._built_lrs: dict[int, list[Any]] = {}  # id of an optimizer -> its groups' LRs when built
        self._closure_grads = False  # the step runs forward and backward in a closure (Lightning)
        self._buffer_saved = False  # torch.save into a buffer, written to a file next (Lightning)
        self.r = Result(sandbox=sandbox)
        self._first_opt: Callable[[], Any] = lambda: None
        self._optimizers: list[weakref.ref[Any]] = []
        self._built: list[weakref.ref[Any]] = []  # every optimizer the script built
        # ids of the parameters the backward passes since the last step gave a gradient: one
        # without a gradient at the step had it removed by the script (a warm-up freeze)
        self._reached: set[str] = set()
        self._schedulers: list[weakref.ref[Any]] = []
        self._scalers: list[weakref.ref[Any]] = []
        self._step_loss = 0.0
        self._scaled: dict[int, float] = {}  # id of a loss scaled by a GradScaler -> the scale
        self._seen_input = False
        self._ran: weakref.WeakSet[Any] = weakref.WeakSet()
        self._batch: Any = None
        self._dataset: Any = None  # a weak reference to the data set of the repeated batch
        self._rng_after_first: RngState | None = None
        self._generators: list[tuple[torch.Generator, torch.Tensor]] = []  # the script's own, and their states
        self._weights0: list[torch.Tensor] = []
        self._in_backward = False
        self._stepped: set[int] = set()  # ids of the optimizers that stepped since the last step
        self._backwards = 0  # backward passes since the last step
        self._written: set[str] = set()  # the files torch.save wrote, and where they were moved
        self._first_loss: FirstLoss | None = None
        self._undo: list[Callable[[], None]] = []
        self._t0 = 0.0

    # ---- running -----------------------------------------------------------------------------
    def run(self) -> Result:
        saved_argv, saved_path0, saved_cwd = sys.argv[:], sys.path[0] if sys.path else "", os.getcwd()
        sys.argv = [str(self.script), *self.argv]
        if sys.path:
            sys.path[0] = str(self.script.parent)
        os.chdir(self.sandbox)
        guard_writes(self.sandbox.parent)
        self.rng.restore()
        self._install()  # before the live probes: a hook of theirs may remove itself mid-iteration
        if self.watch is not None:
            self.watch.__enter__()
        self._t0 = time.perf_counter()
        had_group = _process_group()
        output = io.StringIO()  # the script's own prints, kept out of preflight's report
        try:
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
                runpy.run_path(str(self.script), run_name="__main__")
        except Stop:
            pass
        except SystemExit as exc:
            self.r.status = "exit" if exc.code not in (None, 0) else self.r.status
            self.r.error = f"the script exited with {exc.code!r}" if self.r.status == "exit" else ""
        except Exception as exc:  # the script's own error: the probes say they could not run
            self.r.status, self.r.error = "error", f"{type(exc).__name__}: {exc}{frames.user_line(exc, self.script)}"
        finally:
            _end_process_group(had_group)
            if self.watch is not None:
                status = {"ok": "ok", "exit": "exit", "error": "exception"}.get(self.r.status, "stopped")
                self.r.report = self.watch.close(status)
            self._uninstall()
            end_guard()
            os.chdir(saved_cwd)
            sys.argv = saved_argv
            if sys.path:
                sys.path[0] = saved_path0
            self.r.seconds = time.perf_counter() - self._t0
        self._finish_moved()
        return self.r

    def _stop(self, why: str) -> None:
        if self.r.status == "ok":
            self.r.status = why
        raise Stop()

    # ---- hooks -------------------------------------------------------------------------------
    def _install(self) -> None:
        pre = register_optimizer_step_pre_hook(lambda opt, a, k: self._pre_step(opt, a, k))
        post = register_optimizer_step_post_hook(lambda opt, a, k: self._post_step(opt))
        fwd = torch.nn.modules.module.register_module_forward_pre_hook(self._forward_pre)
        self._undo += [pre.remove, post.remove, fwd.remove]
        if self.keep_input:  # the keyword arguments of the first forward (HF: ``model(**batch)``)
            kw = torch.nn.modules.module.register_module_forward_hook(self._forward_kwargs, with_kwargs=True)
            self._undo.append(kw.remove)
        self._patch(torch.optim.Optimizer, "__init__", self._wrap_optimizer_init)
        # torch's own entries, not the functions the script sees (docs/preflight.md): the
        # autograd engine, and the steps torch.save and torch.load take to open their file
        self._patch(torch.autograd, ENGINE_ENTRY or "backward", self._wrap_engine)  # older torch: the public one
        ser = torch.serialization
        self._patch(ser, "_open_zipfile_writer", functools.partial(self._wrap_open, "wb"))
        self._patch(ser, "_open_file_like", functools.partial(self._wrap_open, ""))
        for name in ("replace", "rename"):
            self._patch(os, name, self._wrap_move)
        self._patch(torch.optim.lr_scheduler.LRScheduler, "__init__", functools.partial(self._wrap_init, self._schedulers))
        self._patch(torch.amp.GradScaler, "__init__", functools.partial(self._wrap_init, self._scalers))
        self._patch(torch.amp.GradScaler, "scale", self._wrap_scale)
        if self.repeat_batch:
            self._patch(_dl._BaseDataLoaderIter, "__next__", self._wrap_next)
        if self.keep_input:  # the baseline launch: the first loss call, for the initial-loss probe
            self._first_loss = FirstLoss()
            self._first_loss.put_up()
            self._undo.append(self._end_first_loss)

    def _uninstall(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        orig = owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)
        setattr(owner, name, make(orig))
        self._undo.append(lambda: setattr(owner, name, orig))

    def _end_first_loss(self) -> None:
        if self._first_loss is not None:
            self._first_loss.take_out()
            self.r.loss_call, self._first_loss = self._first_loss.call, None

    def _wrap_init(self, bucket: list[weakref.ref[Any]], orig: Any) -> Any:
        @functools.wraps(orig)
        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            orig(obj, *args, **kwargs)
            bucket.append(weakref.ref(obj))
        return __init__

    def _wrap_optimizer_init(self, orig: Any) -> Any:
        built, refs = self._built_lrs, self._built

        @functools.wraps(orig)
        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            orig(opt, *args, **kwargs)
            built[id(opt)] = [g.get("lr") for g in opt.param_groups]
            refs.append(weakref.ref(opt))
        return __init__

    def _wrap_scale(self, orig: Any) -> Any:
        launch = self

        @functools.wraps(orig)
        def scale(scaler: Any, outputs: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(scaler, outputs, *args, **kwargs)
            if isinstance(out, torch.Tensor) and out is not outputs and out.numel() == 1:
                launch._scaled = {id(out): float(scaler.get_scale())}
            return out
        return scale

    def _wrap_engine(self, orig: Any) -> Any:
        """torch's entry into the autograd engine, reached by ``Tensor.backward`` and
        ``torch.autograd.backward`` with ``(tensors, grad_tensors, ...)``; ``torch.autograd.grad``
        reaches it with ``accumulate_grad=False`` and is no backward of the step, and one started
        inside a backward (a reentrant activation checkpoint's) is not the script's."""
        launch = self

        @functools.wraps(orig)
        def entry(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if launch._in_backward or not kwargs.get("accumulate_grad", True):
                return orig(tensors, *args, **kwargs)
            if launch.stop_after_save and launch.r.saved and launch.r.steps > 0:
                launch._stop("stopped")  # the checkpoint is on disk (and moved into place)
            loss = tensors[0] if isinstance(tensors, (tuple, list)) and len(tensors) == 1 else tensors
            if isinstance(loss, torch.Tensor) and loss.numel() == 1:
                scale = launch._scaled.pop(id(loss), 1.0)  # scaler.scale(loss): the user's loss
                launch._step_loss += float(loss.detach().float()) / scale  # preflight may sync
            launch._backwards += 1
            launch._in_backward = True
            try:
                out = orig(tensors, *args, **kwargs)
            finally:
                launch._in_backward = False
            if launch.r.steps < GRAD_STEPS:
                launch._reached.update(str(id(p)) for r in launch._built if (o := r()) is not None
                                       for g in o.param_groups for p in g["params"] if p.grad is not None)
            return out
        return entry

    def _wrap_open(self, mode: str, orig: Any) -> Any:
        """``_open_zipfile_writer(f)`` (torch.save) and ``_open_file_like(f, mode)`` (torch.load,
        and torch.save's legacy format), called before the file is opened."""
        launch = self

        @functools.wraps(orig)
        def opener(f: Any, *args: Any, **kwargs: Any) -> Any:
            writing = "w" in (mode or (args[0] if args else kwargs.get("mode", "")))
            path = inside(f, launch.sandbox)
            named = isinstance(f, (str, os.PathLike))
            real = os.path.realpath(os.fspath(f)) if named else ""
            if writing and named:
                own(f)  # torch.save writes from C++, unseen by the sandbox's audit hook
                launch._written.add(real)
                if not path:
                    launch.outside.before_write(real)
            out = orig(f, *args, **kwargs)
            if not writing:
                if path:
                    launch.r.loaded.append(path)
                elif real and launch.outside.wrote(real):  # an absolute --out a launch before wrote
                    launch.r.loaded.append(real)
                    launch.r.rng_outside[real] = holds_rng(Path(real))  # gone after the launch
            elif (path or real) and launch.r.steps > 0:
                launch._saved(path or real)
            elif launch.r.steps > 0 and not isinstance(f, (str, os.PathLike)):
                launch._buffer_saved = True  # Lightning: torch.save to bytes, then a file moved into place
            return out
        return opener

    def _saved(self, path: str) -> None:
        if not self.r.saved:
            self.r.saved_at = self.r.steps
            if self.after_save:
                self.max_steps = min(self.max_steps, self.r.steps + self.after_save)
        self.r.saved.append(path)

    def _wrap_move(self, orig: Any) -> Any:
        launch = self

        @functools.wraps(orig)
        def move(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(dst, (str, os.PathLike)):
                target = inside(dst, launch.sandbox)
                if not target:
                    # Only a checkpoint moved into place is the script's to guard: a library's
                    # own atomic writes (torch.compile's caches, a download) are left alone
                    moved = os.path.realpath(os.fspath(src)) if isinstance(src, (str, os.PathLike)) else ""
                    if launch._buffer_saved or moved in launch._written:
                        real = os.path.realpath(os.fspath(dst))
                        launch._written.add(real)
                        launch.outside.before_write(real)
                        if launch.r.saved and launch.r.saved[-1] == moved:
                            launch.r.saved[-1] = real  # the checkpoint moved into place there
                elif launch.r.saved and inside(src, launch.sandbox) == launch.r.saved[-1]:
                    launch.r.saved[-1] = target  # the checkpoint moved into place (tmp -> final)
                elif launch._buffer_saved:  # the bytes torch.save wrote, moved into place
                    launch._buffer_saved = False
                    launch._saved(target)
            return orig(src, dst, *args, **kwargs)
        return move

    def _wrap_next(self, orig: Any) -> Any:
        launch = self

        @functools.wraps(orig)
        def __next__(it: Any) -> Any:
            # Only training batches repeat: an evaluation loop (under no_grad) or another data
            # set's loader iterates as usual, and ends.
            if not torch.is_grad_enabled() or launch.r.steps > 0 and launch._batch is None:
                return orig(it)
            dataset = getattr(it, "_dataset", None)
            if launch._batch is None:
                launch._batch, launch._dataset = orig(it), weakref.ref(dataset) if dataset is not None else None
                launch.r.repeated = "loader"
            elif launch._dataset is None or launch._dataset() is not dataset:
                return orig(it)
            else:  # the epoch keeps its length: a loop that counts its batches (timm's, by
                orig(it)  # len(loader)) ends it as without preflight
            return clone(launch._batch)  # a fresh copy: the script may change it in place
        return __next__

    def _forward_pre(self, module: Any, args: Any) -> None:
        # A torch.compile'd module: its wrapper's call (eager) is the one to read, not the
        # compiled module's own, which dynamo traces
        if not torch.is_grad_enabled() or torch.compiler.is_compiling():
            return
        if module not in self._ran:  # to name the parameters of every model, a GAN's two
            self._ran.add(module)
            self.r.models.append(module)
        if self._seen_input:
            return
        self._seen_input = True
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None:
            t = first.detach().float()
            self.r.fingerprints.append((float(t.sum()), float(t.abs().sum()), float(t.numel())))
        if self.keep_input and self.r.first_input is None:
            self.r.first_input = (module, clone(args), {})
            # the model that holds this module (``model.backbone(x)`` called directly)
            self.r.owner = largest_container(module, frame_modules(sys._getframe(1)))

    def _forward_kwargs(self, module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if torch.compiler.is_compiling():  # as in _forward_pre
            return
        first = self.r.first_input
        if first is not None and first[0] is module and not first[2] and kwargs:
            self.r.first_input = (module, first[1], clone(kwargs))

    def _base_lrs(self, opt: Any) -> list[Any]:
        """Per group: the LR its schedule starts from (``initial_lr``), else the one it was built with."""
        built = self._built_lrs.get(id(opt), [])
        return [g.get("initial_lr", built[i] if i < len(built) else g["lr"]) for i, g in enumerate(opt.param_groups)]

    def _pre_step(self, opt: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.lr_sweep and all(isinstance(b, (int, float)) for b in self._base_lrs(opt)):
            self._lrs[id(opt)] = [g["lr"] for g in opt.param_groups]
            for g, base in zip(opt.param_groups, self._base_lrs(opt)):
                g["lr"] = base * self.lr_sweep
        if self._first_opt() is None:
            self._first_opt = weakref.ref(opt)
            self.r.lrs = [(type(opt).__name__, float(b) if isinstance(b, (int, float)) else math.nan)
                          for b in self._base_lrs(opt)]
            self.r.lr_options = {k: v for k, v in opt.defaults.items() if isinstance(v, (str, bool, int, float))}
            self.r.framework = frames.framework(sys._getframe(1))
            self._weights0 = [p.detach().clone() for g in opt.param_groups for p in g["params"]]
            self.r.sizes = {str(id(p)): (p.numel(), p.dim()) for g in opt.param_groups for p in g["params"]}
        if all(r() is not opt for r in self._optimizers):
            self._optimizers.append(weakref.ref(opt))
        self._stepped.add(id(opt))
        # A step given a closure (Lightning) runs the forward and backward inside it: the
        # gradients of this step exist only after it
        closure = (args[1] if len(args) > 1 else kwargs.get("closure")) is not None  # args[0]: the optimizer
        if self.r.steps < GRAD_STEPS and not closure:  # every optimizer's: a GAN's generator too
            self.r.grads.append(grad_table(opt, self._reached))
            self._reached = set()
        if opt is not self._first_opt():
            return
        self._closure_grads = closure
        if self.want_snapshots:
            self.r.snapshots.append(self._snapshot())

    def _post_step(self, opt: Any) -> None:
        for g, lr in zip(opt.param_groups, self._lrs.pop(id(opt), ())):
            g["lr"] = lr
        if opt is not self._first_opt():
            return
        self._end_first_loss()  # step 0 is over
        if len(self._stepped) > 1 and self._backwards > 1:
            self.r.adversarial = max(self.r.adversarial, len(self._stepped))
        self._stepped, self._backwards = set(), 0
        if self.r.steps < GRAD_STEPS and self._closure_grads:
            self.r.grads.append(grad_table(opt, self._reached))
            self._reached = set()
        self.r.steps += 1
        self.r.losses.append(self._step_loss)
        self._step_loss = 0.0
        if len(self.r.fingerprints) < self.r.steps:  # no forward seen: keep the lists aligned
            self.r.fingerprints.append(())
        self._seen_input = False
        if self.repeat_batch and not self.r.repeated == "loader":
            # No DataLoader: draw the same numbers again, so a sampler of random indices
            # (torch.randint, random.sample, or a torch.Generator the script holds in a
            # variable) picks the batch of step 1 on every later step.
            if self._rng_after_first is None:
                self._rng_after_first = RngState.capture()
                self._generators = [(g, g.get_state()) for g in frames.generators(sys._getframe(1))]
            else:
                self._rng_after_first.restore()
                for g, state in self._generators:
                    g.set_state(state)
                self.r.repeated = "rng"
        if self.r.steps >= self.max_steps:
            self._stop("stopped")
        start = self.r.repeat_start
        if self.stop_below and len(self.r.losses) > start + 1 and \
                self.r.losses[-1] <= self.stop_below * self.r.losses[start]:
            self._stop("stopped")
        if self.lr_sweep and len(self.r.losses) > start + 1 and \
                not self.r.losses[-1] <= DIVERGED * abs(self.r.losses[start]):
            self._stop("stopped")  # diverged at this LR: the rest of the curve tells nothing more
        if time.perf_counter() - self._t0 > self.seconds:
            self._stop("timeout")

    def _snapshot(self) -> Snapshot:
        opts = [o for r in self._optimizers if (o := r()) is not None]
        params = [p for o in opts for g in o.param_groups for p in g["params"]]
        moments: list[float] = []
        opt_steps: list[float] = []
        for o in opts:
            for p in (p for g in o.param_groups for p in g["params"]):
                for key, value in sorted(o.state.get(p, {}).items()):
                    if not isinstance(value, torch.Tensor):
                        continue
                    if key == "step":
                        opt_steps.append(float(value))
                    else:
                        moments.append(float(value.detach().float().sum()))
        scheds = [s for r in self._schedulers if (s := r()) is not None]
        scalers = [s for r in self._scalers if (s := r()) is not None and s.is_enabled()]
        return Snapshot(
            weights=[float(p.detach().float().sum()) for p in params],
            moments=moments, opt_steps=opt_steps,
            lrs=[float(g["lr"]) for o in opts for g in o.param_groups],
            schedulers=[int(s.last_epoch) for s in scheds],
            scales=[float(s.get_scale()) for s in scalers],
            rng=bytes(torch.get_rng_state().numpy().tobytes()),
            py_rng=hash(repr(random.getstate())) ^ numpy_rng_hash(),
        )

    def _finish_moved(self) -> None:
        opt = self._first_opt()
        if opt is None or not self._weights0:
            return
        now = [p.detach() for g in opt.param_groups for p in g["params"]]
        if len(now) != len(self._weights0):
            return
        changed = sum(int((a != b).sum()) for a, b in zip(self._weights0, now) if a.shape == b.shape)
        total = sum(a.numel() for a in self._weights0) or 1
        self.r.moved = changed / total


def _process_group() -> bool:
    dist = torch.distributed
    return bool(dist.is_available() and dist.is_initialized())


def _end_process_group(had: bool) -> None:
    """A process group the script created ends with its launch, so the next launch can create it."""
    if not had and _process_group():
        torch.distributed.destroy_process_group()
