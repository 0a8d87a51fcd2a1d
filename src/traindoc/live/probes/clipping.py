"""Clipping without ``torch.nn.utils.clip_grad_norm_``: ``clip_grads_with_norm_``, and FSDP1's own.

torchtitan, Accelerate (DTensor parameters on several meshes) and hand-written loops clip in
two calls: ``total = torch.nn.utils.get_total_norm(grads)``, a reduction of their own (the
DTensor's ``full_tensor()``, an all-reduce across pipeline stages), then
``torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)``. The second call carries
both numbers a clip event needs, the norm before clipping and max_norm, so it is the one
wrapped: one ``Clip`` per clipping, as ``clip_grad_norm_`` gives (the core probe's).

Exactly once per clipping:

- torch's own ``clip_grad_norm_`` calls the module-private ``_get_total_norm`` /
  ``_clip_grads_with_norm_``, never the public names patched here, so it is counted once, by
  the core probe (a test checks it on the installed torch).
- One norm may clip several parameter groups: torchtitan's expert-parallel path clips its
  expert and dense parameters with the same total, Accelerate each DTensor mesh and the plain
  parameters with one total (wrapped per mesh by ``DTensor.from_local``). Calls in one step
  whose norm lives in the same storage are one clipping (``norm_key``, host metadata: no sync).

FSDP1's ``FullyShardedDataParallel.clip_grad_norm_`` on sharded parameters computes and
all-reduces the norm itself and clips without torch's functions: it is wrapped too, once
``torch.distributed.fsdp`` is imported (checked before each backward until it is: importing it
ourselves would cost every run seconds). With nothing sharded it calls torch's
``clip_grad_norm_``, which the core probe counts, so then it is not counted again.

A norm still ``Partial`` over a device mesh (a DTensor not yet reduced) holds only this rank's
part of the total: reading it would understate the norm and reducing it would be a collective
of ours, so such a call is not counted.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch

from traindoc.live.probes._patch import Patcher
from traindoc.live.session import Session


def local_norm(total_norm: Any) -> torch.Tensor | None:
    """The total norm as a plain tensor of this rank (a replicated DTensor's local tensor, no
    communication), or None when it is not the whole total (a Partial DTensor, not a tensor)."""
    if not isinstance(total_norm, torch.Tensor):
        return None
    placements = getattr(total_norm, "placements", None)
    if placements is None:
        return total_norm
    if any(p.is_partial() for p in placements):
        return None
    local: torch.Tensor = getattr(total_norm, "to_local")()  # a DTensor (torch.distributed may be absent)
    return local


def norm_key(norm: torch.Tensor) -> tuple[int, int]:
    """Which storage the norm's value is in: the same total handed to several calls."""
    return norm.untyped_storage().data_ptr(), int(norm.storage_offset())


class ClippingProbe:
    name = "clipping"

    def __init__(self, session: Session, patcher: Patcher) -> None:
        self.s = session
        self._patcher = patcher
        # The last clipping counted: its step, max_norm and norm's storage. The tensor is
        # kept so that its storage is not reused by another norm while it is compared.
        self._last: tuple[int, float, tuple[int, int]] | None = None
        self._last_norm: torch.Tensor | None = None
        self._fsdp_patched = False

    def install(self) -> None:
        utils = torch.nn.utils
        if hasattr(utils, "clip_grads_with_norm_"):  # torch >= 2.6
            self._patcher.patch(utils, "clip_grads_with_norm_", self._wrap)
        self._patcher.on_backward(self.name, before=self._look_for_fsdp)

    def uninstall(self) -> None:
        self._last = self._last_norm = None

    def _look_for_fsdp(self, loss: Any) -> None:
        if self._fsdp_patched:  # every backward: one flag once FSDP1 is wrapped
            return
        fsdp = sys.modules.get("torch.distributed.fsdp")
        cls = getattr(fsdp, "FullyShardedDataParallel", None)
        if cls is not None:
            self._fsdp_patched = True
            self._patcher.patch(cls, "clip_grad_norm_", self._wrap_fsdp)

    def _wrap_fsdp(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def clip_grad_norm_(module: Any, max_norm: float, *args: Any, **kwargs: Any) -> Any:
            total = orig(module, max_norm, *args, **kwargs)
            handles = getattr(module, "_all_handles", None)
            # Nothing sharded: FSDP called torch's clip_grad_norm_ (counted by the core probe).
            if handles and any(getattr(h, "uses_sharded_strategy", False) for h in handles):
                probe._patcher.guard(probe.name, probe._on_clip, total, max_norm)
            return total

        return clip_grad_norm_

    def _wrap(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def clip_grads_with_norm_(parameters: Any, max_norm: float, total_norm: Any, *args: Any,
                                  **kwargs: Any) -> Any:
            out = orig(parameters, max_norm, total_norm, *args, **kwargs)
            probe._patcher.guard(probe.name, probe._on_clip, total_norm, max_norm)
            return out

        return clip_grads_with_norm_

    def _on_clip(self, total_norm: Any, max_norm: float) -> None:
        norm = local_norm(total_norm)
        if norm is None:
            return
        this = (self.s.current_step, float(max_norm), norm_key(norm))
        if this == self._last:
            return  # another parameter group of the clipping just counted
        self._last, self._last_norm = this, norm
        self.s.on_clip(norm, float(max_norm))
