"""The ``torch.distributed`` collectives the script calls, seen from inside (live), without
replacing them.

What is seen, and how:

- **Which tensors, with grad or not** (``autograd-collective``, and the storages of the tensors
  the script all-reduces or broadcasts, ``synced``, so that the rank comparison knows which
  tensors the script keeps alike on every rank): torch hands each collective of
  ``torch.distributed`` to a ``TorchFunctionMode``, so the op-level mode (``probes/_ops.py``)
  sees them in its windows: a sampled step's forward, and on sampled steps also from the end of
  the backward to the optimizer step (where hand-written gradient all-reduces run), the model's
  construction (a broadcast of the initial weights) and evaluations. A call made with grad
  mode on, on a tensor that requires grad, is reported once per call site as a
  ``CollectiveInGraph`` event. The differentiable collectives (``torch.distributed.nn``) call
  these inside an autograd Function's forward, where grad mode is off: they are not reported.
- **The time inside collectives** (``spent``), on every step, so that a rank's own work can
  leave out the time it waited for the others (``live/ranks.py``): on Python 3.12 and later,
  ``sys.monitoring`` events on the collectives' own code (and DDP's buffer broadcast in its
  forward): nothing the script can see changes. On Python 3.10 and 3.11, which have no such
  events, the public collectives of ``torch.distributed`` (and ``_broadcast_coalesced``) are
  wrapped while the script is watched: the wrapper only reads the clock, stands aside while
  dynamo traces (``torch.compile(fullgraph=True)`` of a function that all-reduces compiles as
  in a bare run), and a patch of the user's made on top of it stays when traindoc leaves
  (docs/live-patches.md).
"""

from __future__ import annotations

import functools
import inspect
import sys
import time
from typing import Any, Callable

import torch

from traindoc.events import CollectiveInGraph
from traindoc.live.objects import user_site

# The collectives of torch.distributed that take the tensors they fill or change, by the names
# torch hands a mode (the deprecated ``*_into_tensor`` / ``*_tensor`` names call the ``*_single`` ones).
OPS = ("all_reduce", "all_gather", "all_gather_single", "all_gather_into_tensor", "broadcast", "reduce",
       "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor", "all_to_all_single")
# Timed only: DDP's forward broadcasts its buffers through this one (a C++ function).
TIMED = ("_broadcast_coalesced",)
# Those after which every rank holds the same values in the tensor passed (a synchronisation).
SYNCING = frozenset({"all_reduce", "broadcast"})
MAX_SYNCED = 65536  # storages noted between two reads (a run's per-parameter all-reduces)
WINDOW = "collectives"  # the op-level window from a sampled step's backward to its optimizer step


class Collectives:
    def __init__(self, session: Any, queued: Callable[[], float] | None = None) -> None:
        self.s = session
        self._queued = queued or (lambda: 0.0)
        self._clock: _Monitor | None = None
        self._ops: Any = None
        self._sites: set[tuple[str, str]] = set()
        self.spent = 0.0  # seconds inside collectives since install (wall time)
        # Of those, seconds the thread waited for a CPU core (``queued``: a run-queue clock),
        # so that a caller subtracting both counts that wait once.
        self.spent_queued = 0.0
        # Storage addresses of the tensors passed to all_reduce/broadcast since the last
        # ``take_synced`` (ranks.py matches them to parameters and their gradients).
        self.synced: set[int] = set()
        self._depth = 0  # collectives now running (one calls another: timed once)
        self._t0 = self._q0 = 0.0

    def install(self, patcher: Any) -> None:
        """``patcher``: the probes' (its op-level mode, its hooks, and its patches, restored
        with the probes' own)."""
        import torch.distributed as dist

        if not dist.is_available():
            return
        funcs = [getattr(dist, op) for op in OPS if hasattr(dist, op)]
        self._ops = patcher.ops
        patcher.ops.listen(WINDOW, funcs, self._seen, own=WINDOW)
        patcher.on_backward(WINDOW, after=self._open, sampled_only=True)
        patcher.on_step(WINDOW, pre=self._close)
        codes = [inspect.unwrap(f).__code__ for f in funcs]
        ddp = _ddp_broadcast()
        if ddp is not None:
            codes.append(ddp)
        self._clock = _Monitor.start(codes, self._enter, self._leave)
        if self._clock is None:  # Python 3.10/3.11: the public collectives wrapped to read the clock
            for op in OPS + TIMED:
                if hasattr(dist, op):
                    patcher.patch(dist, op, lambda original: _timed(original, self._enter, self._leave))

    def take_synced(self) -> set[int]:
        synced, self.synced = self.synced, set()
        return synced

    def uninstall(self) -> None:
        if self._clock is not None:
            self._clock.stop()
            self._clock = None
        if self._ops is not None:
            self._ops.release(WINDOW)

    # ---- the time inside collectives -----------------------------------------------------------
    def between(self) -> None:
        """No collective is running now (an optimizer step's end, a round's): one an exception
        left without its end event is over."""
        self._depth = 0

    def _enter(self) -> None:
        if not self._depth:
            self._t0, self._q0 = time.perf_counter(), self._queued()
        self._depth += 1

    def _leave(self) -> None:
        self._depth = max(self._depth - 1, 0)
        if not self._depth:
            self.spent += time.perf_counter() - self._t0
            self.spent_queued += self._queued() - self._q0

    # ---- which tensors (the op-level mode) ------------------------------------------------------
    def _open(self, loss: Any) -> None:
        # Not inside a step evaluating its closure (LBFGS): the step has begun, and the window
        # would stay open over the optimizer's own ops and the line search's re-evaluations.
        if self.s.clock.closure is None:
            self._ops.hold(WINDOW, now=True)

    def _close(self, opt: Any, closure: bool) -> None:
        if self._ops.held(WINDOW):
            self._ops.pause()  # ends our window; the optimizer step runs without the mode

    def _seen(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        op = getattr(func, "__name__", "collective")
        if op in SYNCING and len(self.synced) < MAX_SYNCED and args and isinstance(args[0], torch.Tensor):
            try:
                self.synced.add(args[0].untyped_storage().data_ptr())
            except Exception:  # a tensor without storage (a DTensor, a fake): not noted
                pass
        if torch.is_grad_enabled():
            self._check(op, args)

    def _check(self, op: str, args: tuple[Any, ...]) -> None:
        tensors = [a for a in args[:2] if isinstance(a, torch.Tensor)]
        tensors += [t for a in args[:2] if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
        attached = next((t for t in tensors if t.requires_grad), None)
        if attached is None:
            return
        where = user_site(3)
        if (op, where) in self._sites:
            return
        self._sites.add((op, where))
        made_by = type(attached.grad_fn).__name__ if attached.grad_fn is not None else "a leaf"
        what = f"a {tuple(attached.shape)} {str(attached.dtype).replace('torch.', '')} tensor made by {made_by}"
        self.s.emit(CollectiveInGraph(step=self.s.clock.current_step, op=op, tensor=what, where=where))


def _ddp_broadcast() -> Any:
    """The code of DDP's buffer broadcast in its forward (the C++ ``_broadcast_coalesced`` has
    no code of its own to watch), when this torch has it."""
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
    except Exception:
        return None
    method = getattr(DDP, "_distributed_broadcast_coalesced", None)
    return getattr(method, "__code__", None)


class _Monitor:
    """``sys.monitoring`` (Python 3.12+): start and end events of the given code objects only."""

    def __init__(self, mon: Any, tool: int) -> None:
        self._mon, self.tool = mon, tool

    @classmethod
    def start(cls, codes: list[Any], enter: Callable[[], None], leave: Callable[[], None]) -> _Monitor | None:
        mon = getattr(sys, "monitoring", None)
        if mon is None:
            return None
        for tool in (4, 3):  # the ids CPython leaves free (debuggers, coverage and profilers have theirs)
            try:
                mon.use_tool_id(tool, "traindoc")
            except ValueError:  # taken by another tool
                continue
            ev = mon.events
            mon.register_callback(tool, ev.PY_START, lambda code, offset: enter())
            mon.register_callback(tool, ev.PY_RETURN, lambda code, offset, value: leave())
            # An exception out of a collective is no local event (PY_UNWIND is global only):
            # the clock's owner calls ``Collectives.between`` where none can be running.
            for code in codes:
                mon.set_local_events(tool, code, ev.PY_START | ev.PY_RETURN)
            return cls(mon, tool)
        return None

    def stop(self) -> None:
        mon = self._mon
        for event in (mon.events.PY_START, mon.events.PY_RETURN):
            mon.register_callback(self.tool, event, None)
        if hasattr(mon, "clear_tool_id"):  # 3.13+: the local events go too
            mon.clear_tool_id(self.tool)
        mon.free_tool_id(self.tool)


def _timed(original: Callable[..., Any], enter: Callable[[], None], leave: Callable[[], None]) -> Callable[..., Any]:
    compiling = torch.compiler.is_compiling

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if compiling():  # dynamo traces torch's own function, as in a bare run
            return original(*args, **kwargs)
        enter()
        try:
            return original(*args, **kwargs)
        finally:
            leave()

    return collective


__all__ = ["OPS", "TIMED", "Collectives"]
