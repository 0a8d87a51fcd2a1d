"""The core probes: how traindoc hooks into torch with zero changes to the user's script.

Global optimizer step hooks, the start of each backward (probes/_patch.py), DataLoader
iteration, ``F.cross_entropy`` and the binary losses (seen by the op-level mode on sampled
steps, probes/_ops.py), the low-precision casts of ``nn.Module``, and global module forward
hooks installed on sampled steps only. Every wrapper calls the original exactly as the user did
and returns its result untouched; our own work runs in ``_guard`` so that an exception in
traindoc disables that probe (reported once) and never reaches the user's script. Inside
``torch.compile`` tracing the probes do nothing, and once a compiled model is called no global
module hook goes up again, so dynamo compiles what a bare run compiles.
"""

from __future__ import annotations

import functools
import sys
import warnings
from typing import Any, Iterable

import torch
import torch.nn.functional as F
from torch.utils.data import dataloader as _dl

from traindoc.events import BatchShape, Cast, Classification, Event
from traindoc.live import measure
from traindoc.live.objects import file_line, library_caller, user_site
from traindoc.live.probes._ops import is_compiled_module, torch_function
from traindoc.live.probes._patch import Patcher, is_traced
from traindoc.live.probes.base import FirstCalls, Probe
from traindoc.live.probes.batches import BatchContent
from traindoc.live.probes.train_mode import TrainModes
from traindoc.live.session import Session

_is_traced = is_traced
# Keys of a batch whose sequences are concatenated on purpose (padding-free packing, e.g.
# transformers' DataCollatorWithFlattening): batch dimension 1 is intended there.
_PACKED_KEYS = ("position_ids", "cu_seq_lens_q", "cu_seqlens", "seq_idx")
_COMPILE_HOOK_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"


class CoreProbes(Probe):
    name = "core"
    signals = ("loss", "backward", "params", "optimizer", "grad_norm", "clip", "activations", "batch", "batch_shape", "classification", "cast", "lifecycle", "step_skipped", "phase", "unstepped", "norms", "train_mode")
    required = True

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._forward: list[Any] = []
        self._depth = 0
        self._unbatched = False  # the latest root forward ran on one unbatched vector
        self._empty = False  # the module whose output is measured got an input with no element
        self._calls = FirstCalls()  # the calls of each module a sampled step measures
        self._iterators = 0
        self._filter: object = None
        self._content = BatchContent(session)  # Batch events (repeated-batch)
        self._registration: list[Any] = []  # parameter/buffer registration hooks, until the first step
        self._modes = TrainModes(session)  # TrainMode events (trained-in-eval-mode)

    # ---- install / uninstall -----------------------------------------------------------------
    def install(self) -> None:
        s, patcher = self.s, self._patcher
        patcher.on_step("optimizer", pre=s.on_step_pre, post=s.on_step_post)
        self._patch(torch.optim.Optimizer, "__init__", self._wrap_optimizer_init)
        patcher.on_backward("backward", before=s.on_backward)
        patcher.on_backward("params", after=s.model.note_reached, sampled_only=True)
        patcher.on_backward("forward", before=self._modes.on_backward, sampled_only=True)
        patcher.on_step("forward", pre=self._modes.on_step)
        self._patch(_dl._BaseDataLoaderIter, "__next__", self._wrap_next)
        patcher.ops.listen("cross_entropy", [torch_function(F.cross_entropy)], self._on_cross_entropy)
        patcher.ops.listen("cross_entropy", [torch_function(F.nll_loss)], self._on_nll)
        patcher.ops.listen("cross_entropy", [torch_function(F.binary_cross_entropy_with_logits),
                                             torch_function(F.binary_cross_entropy)], self._on_bce)
        for method in ("to", "bfloat16", "half"):
            self._patch(torch.nn.Module, method, self._wrap_cast)
        self._patch(torch.optim.Optimizer, "zero_grad", self._wrap_zero_grad)
        self._patch(torch.nn.Module, "zero_grad", self._wrap_zero_grad)
        # Our global forward hooks make torch warn on every call of a torch.compile'd module;
        # the warning is about us, not the user's code, so it must not reach their output.
        warnings.filterwarnings("ignore", message=_COMPILE_HOOK_WARNING, category=UserWarning)
        self._filter = warnings.filters[0]
        if s.level.activations and s.clock.sampled:
            self.on_sampling(True)
        if not s.clock.trained:  # the model is being built: where its layers are made
            from torch.nn.modules import module as _module

            note = self._note_registration
            self._registration = [_module.register_module_parameter_registration_hook(note),
                                  _module.register_module_buffer_registration_hook(note)]

    def _note_registration(self, module: Any, name: str, value: Any) -> None:
        self._guard("forward", self.s.model.note_registration, module)

    def on_first_step(self, opt: Any) -> None:
        self._end_registration()

    def _end_registration(self) -> None:
        for h in self._registration:
            h.remove()
        self._registration = []

    def uninstall(self) -> None:
        self.on_sampling(False)
        self._end_registration()
        filters: list[Any] = warnings.filters  # type: ignore[assignment]  # typeshed: Sequence; it is a list
        if self._filter in filters:
            filters.remove(self._filter)
            warnings._filters_mutated()  # type: ignore[attr-defined]  # a private CPython hook typeshed leaves out

    # ---- wrappers ------------------------------------------------------------------------------
    def _wrap_optimizer_init(self, orig: Any) -> Any:
        probes = self

        @functools.wraps(orig)
        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            orig(opt, *args, **kwargs)
            probes._guard("optimizer", probes.s.on_optimizer_created, opt)

        return __init__

    def _wrap_zero_grad(self, orig: Any) -> Any:
        session = self.s

        @functools.wraps(orig)
        def zero_grad(obj: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(obj, *args, **kwargs)
            # After a backward, before any step: the script dropped that backward's gradients,
            # unless an optimizer's step is evaluating its closure (LBFGS's line search: one
            # step, many closures).
            if session.clock.micro and not session.clock.round_done and not _in_optimizer_step():
                session.on_zero_grad()  # sets a flag: cannot raise
            return out

        return zero_grad

    def _wrap_next(self, orig: Any) -> Any:
        probes = self

        ops = self._patcher.ops

        @functools.wraps(orig)
        def __next__(it: Any) -> Any:
            ops.settle()  # the batch is made without the op-level mode of the last backward
            batch = orig(it)
            probes._guard("dataloader", probes._on_batch, it, batch)
            return batch

        return __next__

    def _on_batch(self, it: Any, batch: Any) -> None:
        index = int(getattr(it, "_num_yielded", 1)) - 1
        if index == 0:
            self._iterators += 1
        head = self._content.head(it, index)  # a pass's first and last batches: fingerprinted, sampled or not
        measuring = self.s.clock.measuring
        if not measuring and not head:
            return
        every = _tensors(batch)
        if measuring and every and torch.is_grad_enabled():
            self._batch_shape(it, batch, every, index)
        self._content.emit(it, every, index, self._iterators)

    def _batch_shape(self, it: Any, batch: Any, tensors: list[torch.Tensor], index: int) -> None:
        """Shapes are host metadata: no device sync."""
        sampler: Any = getattr(it, "_index_sampler", None)
        try:
            last = index >= len(sampler) - 1
        except TypeError:
            last = False
        dims = tuple(int(t.shape[0]) if t.ndim else 0 for t in tensors)
        collate = _describe(getattr(it, "_collate_fn", None)) if all(d == 1 for d in dims) else ""
        self.s.emit(BatchShape(
            step=self.s.clock.current_step, loader=type(getattr(it, "_dataset", it)).__name__,
            drawn=int(getattr(sampler, "batch_size", 0) or 0), dims=dims,
            shapes=tuple(str(tuple(t.shape)) for t in tensors),
            packed=isinstance(batch, dict) and any(k in batch for k in _PACKED_KEYS), last=last,
            collate=collate))

    # ---- loss calls (op-level, sampled steps) -------------------------------------------------
    def _on_bce(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        input = args[0] if args else kwargs.get("input")
        if (not self.s.clock.measuring or not torch.is_grad_enabled() or not isinstance(input, torch.Tensor)
                or input.ndim < 1 or input.shape[0] < 2):
            return
        name = func.__name__
        with torch.no_grad():
            probs = torch.sigmoid(input.detach().float()) if name.endswith("with_logits") else input.detach()
        self.s.model.on_loss_input(name, probs)

    def _on_nll(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """``F.nll_loss`` after ``log_softmax`` (pygcn, PyTorch's MNIST example) is a
        cross-entropy: judged as one when its input's rows are log-probabilities."""
        self._on_cross_entropy(func, args, kwargs, out, fn="nll_loss")

    def _on_cross_entropy(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
                          fn: str = "cross_entropy") -> None:
        # torch hands the mode (input, target, weight) and the rest as keywords
        input = args[0] if args else kwargs.get("input")
        if (not self.s.clock.measuring or not torch.is_grad_enabled() or kwargs.get("reduction", "mean") != "mean"
                or not isinstance(input, torch.Tensor) or not isinstance(out, torch.Tensor) or out.numel() != 1):
            return
        classes = int(input.shape[1]) if input.ndim >= 2 else int(input.shape[0])
        self.s.next_step_begins()
        step = self.s.clock.current_step
        # Step 0 only (bad-initial-loss judges the first loss): a learnable logit scale or
        # temperature sets how far above ln(C) the first loss may start. A bounded graph walk.
        scale = measure.learnable_scale(input) if step == 0 and input.requires_grad else None
        out = measure.local(out).detach()  # a DTensor under loss_parallel(): replicated
        extra = []  # read with the loss in one deferred copy
        if fn == "nll_loss":  # how far its rows are from log-probabilities (0 after log_softmax)
            lse = torch.logsumexp(input.detach().float(), dim=1 if input.ndim >= 2 else 0)
            extra.append(measure.local(lse.abs().max()).to(out.device))
        if scale is not None:
            extra.append(measure.local(scale).to(out.device).float().reshape(()))
        packed = torch.stack([out.float().reshape(()), *extra]) if extra else out.reshape(1)

        def decode(vals: list[float]) -> Iterable[Event]:
            if fn == "nll_loss" and not vals.pop(1) < 1e-3:
                return  # scores, not log-probabilities: no reference value
            yield Classification(step=step, classes=classes, value=vals[0], fn=fn,
                                 scale=vals[1] if len(vals) > 1 else None)

        self.s.defer(packed, decode)

    def _wrap_cast(self, orig: Any) -> Any:
        probes = self
        name = orig.__name__

        @functools.wraps(orig)
        def cast(module: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(module, *args, **kwargs)
            probes._guard("cast", probes._on_cast, module, name, args, kwargs)
            return out

        return cast

    def _on_cast(self, module: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if name == "to":
            dtype = torch._C._nn._parse_to(*args, **kwargs)[1]
        else:
            dtype = torch.bfloat16 if name == "bfloat16" else torch.float16
        if dtype in measure.LOW_PRECISION:
            self.s.emit(Cast(module=type(module).__name__, dtype=str(dtype), where=user_site(2),
                             via=library_caller(2)))

    # ---- forward hooks (sampled steps) ------------------------------------------------------
    def on_sampling(self, on: bool) -> None:
        """Forward hooks up on sampled steps only."""
        if on and not self._forward and not self.s.compiled:
            from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

            self._depth = 0
            self.clock.in_forward = False
            self._forward = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        elif not on and self._forward:
            for h in self._forward:
                h.remove()
            self._forward = []

    def on_sampled_round_end(self, step: int) -> None:
        self._calls.clear()
        self.s.model.end_round()

    def _pre(self, module: Any, args: Any) -> None:
        if _is_traced():
            return
        if self._depth == 0 and is_compiled_module(module):  # before dynamo sees our hooks
            self.s.mark_compiled()
            return
        if self._depth == 0 and next(module.parameters(), None) is not None:
            self.clock.in_forward = True  # until this module returns
            self.s.next_step_begins()
            if torch.is_grad_enabled():
                self.clock.forwards += 1
                self.clock.forward_calls += 1
                self.clock.rows = max(self.clock.rows, _rows(args[0] if args else None))
                self._guard("forward", self.s.model.adopt_model, module)  # names before inner modules run
                self._guard("forward", self._modes.on_forward, module)
            else:
                self._guard("forward", self._count_inferred, module, args)
        if torch.is_grad_enabled() and self._calls.take(module):
            self._measure(self._on_input, module, args)
        self._depth += 1

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if _is_traced():
            return
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:
            self.clock.in_forward = False
        if not torch.is_grad_enabled() or not self._calls.taken(module):
            return
        x = args[0] if args else None
        if self._depth == 0:  # a model run on one unbatched vector: its output has no batch dim
            self._unbatched = _one_vector(x)
        self._empty = isinstance(x, torch.Tensor) and x.numel() == 0  # its shape: no sync
        self._measure(self._on_output, module, output)

    def _count_inferred(self, module: Any, args: Any) -> None:
        """A model run without gradients: the step computes its targets with it when it is the
        trained model in train mode or a copy of it in either mode (a target network kept in
        eval mode), on a batch of the training batch's size (compared at the backward; a
        prediction on a few test rows, acting on one state, the model's own evaluation are not)."""
        rows = _rows(args[0] if args else None)
        model = self.s.model
        if rows > 1 and (model.is_trained(module) if module.training else model.is_copy(module)):
            self.clock.inferred_rows.add(rows)

    def _on_input(self, module: Any, args: Any) -> None:
        self._guard("forward", self.s.model.on_module_input, module, args)

    def _on_output(self, module: Any, output: Any) -> None:
        self._guard("forward", self.s.model.on_module_output, module, output, self._empty)
        for listener in self.s.output_listeners:
            listener(module, output)
        if self._depth == 0 and next(module.parameters(), None) is not None:
            self._guard("forward", self.s.model.on_root_forward, module, output, self._unbatched)

    def _measure(self, fn: Any, module: Any, value: Any) -> None:
        """Our measurements of a module call: without autograd, and with the op-level mode
        aside, so that our own ops cost no Python call each and reach no listener."""
        mode = self._ops.aside()
        try:
            with torch.no_grad():
                fn(module, value)
        finally:
            self._ops.back(mode)


def _describe(fn: Any) -> str:
    """``name (file:line)`` of a function or callable object, or ""."""
    code = getattr(fn, "__code__", None) or getattr(getattr(type(fn), "__call__", None), "__code__", None)
    if code is None:
        return ""
    name = getattr(fn, "__qualname__", None) or f"{type(fn).__qualname__}.__call__"
    return f"{name} ({file_line(code.co_filename, code.co_firstlineno)})"


def _in_optimizer_step() -> bool:
    """Is an optimizer's ``step`` on the stack (a closure it called is running)? Walks a few
    frames, only when gradients are cleared after a backward with no step since."""
    frame: Any = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return False
        if frame.f_code.co_name == "step" and isinstance(frame.f_locals.get("self"), torch.optim.Optimizer):
            return True
        frame = frame.f_back
    return False


def _tensors(batch: Any) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, (list, tuple)):
        return [t for b in batch for t in _tensors(b)][:4]
    if isinstance(batch, dict):
        return [t for b in batch.values() for t in _tensors(b)][:4]
    return []


def _one_vector(x: Any) -> bool:
    """A model's first argument is one unbatched observation (``policy(state)``, ``state`` of
    shape (4,)), not a batch: a 1-D float tensor (1-D integers are a batch of token ids)."""
    return isinstance(x, torch.Tensor) and x.ndim == 1 and x.is_floating_point()


def _rows(x: Any) -> int:
    """The samples a model's first argument holds: 1 for a scalar or one unbatched vector, its
    first dimension otherwise; 0 when it is not a tensor."""
    if not isinstance(x, torch.Tensor):
        return 0
    return 1 if x.ndim == 0 or _one_vector(x) else int(x.shape[0])
