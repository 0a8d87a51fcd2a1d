"""The ``torch.distributed`` collectives the script calls, seen from inside (live).

While installed, the collectives of ``torch.distributed`` that take tensors in place are
wrapped: a call made with grad mode on, on a tensor that requires grad, is reported once per
call site as a ``CollectiveInGraph`` event (``autograd-collective``); the call itself always
goes through unchanged. The check costs an attribute read per tensor and is skipped under
``no_grad``. The differentiable collectives (``torch.distributed.nn.functional``) call these
inside an autograd Function's forward, where grad mode is off: they are not reported.

Every wrapped call is also timed (``spent``: seconds inside collectives, DDP's buffer broadcast
in its forward included), so that a rank's own work can leave out the time it waited for the
others (``live/ranks.py``); and the storages of the tensors the script all-reduces or
broadcasts are noted (``synced``) so that the rank comparison knows which tensors the script
keeps alike on every rank. Two clock reads and a storage address per tensor: nothing next to
the collective itself.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

import torch

from traindoc.events import CollectiveInGraph
from traindoc.live.objects import user_site

# The collectives of torch.distributed that take the tensors they fill or change.
OPS = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce",
       "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single")
# Those after which every rank holds the same values in the tensor passed (a synchronisation).
SYNCING = frozenset({"all_reduce", "broadcast"})
# Timed only: DDP's forward broadcasts its buffers through this one (rank 0's to every rank).
TIMED = ("_broadcast_coalesced",)
MAX_SYNCED = 65536  # storages noted between two reads (a run's per-parameter all-reduces)


class Collectives:
    def __init__(self, session: Any, queued: Callable[[], float] | None = None) -> None:
        self.s = session
        self._queued = queued or (lambda: 0.0)
        self._saved: list[tuple[Any, str, Any]] = []
        self._sites: set[tuple[str, str]] = set()
        self.spent = 0.0  # seconds inside collectives since install (wall time)
        # Of those, seconds the thread waited for a CPU core (``queued``: a run-queue clock),
        # so that a caller subtracting both counts that wait once.
        self.spent_queued = 0.0
        # Storage addresses of the tensors passed to all_reduce/broadcast since the last
        # ``take_synced`` (ranks.py matches them to parameters and their gradients).
        self.synced: set[int] = set()

    def install(self) -> None:
        import torch.distributed as dist

        if not dist.is_available():
            return
        for op in OPS + TIMED:
            original = getattr(dist, op, None)
            if original is None:
                continue
            self._saved.append((dist, op, original))
            setattr(dist, op, self._wrap(op, original))

    def take_synced(self) -> set[int]:
        synced, self.synced = self.synced, set()
        return synced

    def uninstall(self) -> None:
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()

    def _wrap(self, op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        checked, syncing = op in OPS, op in SYNCING

        @functools.wraps(original)
        def collective(*args: Any, **kwargs: Any) -> Any:
            if checked and torch.is_grad_enabled():
                try:
                    self._check(op, args, kwargs)
                except Exception as exc:  # never let traindoc break the user's training
                    self.s.fail("collectives", exc)
            if syncing and len(self.synced) < MAX_SYNCED:
                t = args[0] if args else kwargs.get("tensor")
                if isinstance(t, torch.Tensor):
                    try:
                        self.synced.add(t.untyped_storage().data_ptr())
                    except Exception:  # a tensor without storage (a DTensor, a fake): not noted
                        pass
            t0, q0 = time.perf_counter(), self._queued()
            try:
                return original(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - t0
                self.spent_queued += self._queued() - q0

        return collective

    def _check(self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if "collectives" in self.s.failed:
            return
        tensors = [a for a in args[:2] if isinstance(a, torch.Tensor)]
        tensors += [t for a in args[:2] if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
        tensors += [v for k, v in kwargs.items() if k in ("tensor", "input", "output") and isinstance(v, torch.Tensor)]
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
