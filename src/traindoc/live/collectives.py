"""The ``torch.distributed`` collectives the script calls, seen from inside (live).

While installed, the collectives of ``torch.distributed`` that take tensors in place are
wrapped: a call made with grad mode on, on a tensor that requires grad, is reported once per
call site as a ``CollectiveInGraph`` event (``autograd-collective``); the call itself always
goes through unchanged. The check costs an attribute read per tensor and is skipped under
``no_grad``. The differentiable collectives (``torch.distributed.nn.functional``) call these
inside an autograd Function's forward, where grad mode is off: they are not reported.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from traindoc.events import CollectiveInGraph
from traindoc.live.objects import user_site

# The collectives of torch.distributed that take the tensors they fill or change.
OPS = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce",
       "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single")


class Collectives:
    def __init__(self, session: Any) -> None:
        self.s = session
        self._saved: list[tuple[Any, str, Any]] = []
        self._sites: set[tuple[str, str]] = set()

    def install(self) -> None:
        import torch.distributed as dist

        if not dist.is_available():
            return
        for op in OPS:
            original = getattr(dist, op, None)
            if original is None:
                continue
            self._saved.append((dist, op, original))
            setattr(dist, op, self._wrap(op, original))

    def uninstall(self) -> None:
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()

    def _wrap(self, op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def collective(*args: Any, **kwargs: Any) -> Any:
            if torch.is_grad_enabled():
                try:
                    self._check(op, args, kwargs)
                except Exception as exc:  # never let traindoc break the user's training
                    self.s.fail("collectives", exc)
            return original(*args, **kwargs)

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
        self.s.emit(CollectiveInGraph(step=self.s.current_step, op=op, tensor=what, where=where))
