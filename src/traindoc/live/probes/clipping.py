"""Gradient clipping: one ``Clip`` per clipping, however it is written: torch's
``clip_grad_norm_`` and ``clip_grads_with_norm_`` (seen through one dispatcher, probes/_clip.py,
with nothing of torch replaced), FSDP1's own, and DeepSpeed's.

torchtitan, Accelerate (DTensor parameters on several meshes) and hand-written loops clip in
two calls: ``total = torch.nn.utils.get_total_norm(grads)``, a reduction of their own (the
DTensor's ``full_tensor()``, an all-reduce across pipeline stages), then
``torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)``. That second call is the one
``clip_grad_norm_`` makes inside, with the norm it measured: it carries both numbers a clip
event needs, the norm before clipping and max_norm.

Exactly once per clipping: one norm may clip several parameter groups (torchtitan's
expert-parallel path clips its expert and dense parameters with the same total, Accelerate
each DTensor mesh and the plain parameters with one total, wrapped per mesh by
``DTensor.from_local``). Calls in one step whose norm lives in the same storage are one
clipping (``norm_key``, host metadata: no sync).

FSDP1's ``FullyShardedDataParallel.clip_grad_norm_`` on sharded parameters computes and
all-reduces the norm itself and clips without torch's functions: it is wrapped too, once
``torch.distributed.fsdp`` is imported (checked before each backward until it is: importing it
ourselves would cost every run seconds). With nothing sharded it calls torch's
``clip_grad_norm_``, counted through the dispatcher, so then it is not counted again.

DeepSpeed clips inside its engine: ``engine.step()`` with ``gradient_clipping`` in the config
calls DeepSpeed's own ``clip_grad_norm_`` (fp32 without ZeRO), or its ZeRO / bf16 / fp16
optimizer computes the norm, clips and keeps it (``engine.get_global_grad_norm()``, before
clipping, in the user's units). ``DeepSpeedEngine._take_model_step`` is wrapped once
``deepspeed.runtime.engine`` is imported: the norm DeepSpeed computed, and its
``gradient_clipping()``, become one ``Clip`` of the step it took.

A norm still ``Partial`` over a device mesh (a DTensor not yet reduced) holds only this rank's
part of the total: reading it would understate the norm and reducing it would be a collective
of ours, so such a call is not counted.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch

from traindoc.live.objects import ObjectMap
from traindoc.live.probes._clip import ClipCall
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session
from traindoc.live.zero import read_zero


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


class ClippingProbe(Probe):
    name = "clipping"
    signals = ("clip", "grad_norm", "params")
    required = True

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        # The last clipping counted: its step, max_norm and norm's storage. The tensor is
        # kept so that its storage is not reused by another norm while it is compared.
        self._last: tuple[int, float, tuple[int, int]] | None = None
        self._last_norm: torch.Tensor | None = None
        self._fsdp_patched = False
        self._deepspeed_patched = False
        self._ds_engines = ObjectMap()  # engines whose parameters are known
        self._ds_norm: Any = None  # the norm DeepSpeed's clip_grad_norm_ returned in this step

    def install(self) -> None:
        self._patcher.clips.listen(self.name, before=self._before_clip, after=self._after_clip)
        # Frameworks are imported and wrapped before training; a sampled step (the first
        # ones all are) finds them before their clipping matters.
        self._patcher.on_backward(self.name, before=self._look_for_frameworks, sampled_only=True)

    def uninstall(self) -> None:
        self._last = self._last_norm = None

    def _look_for_frameworks(self, loss: Any) -> None:
        if not self._fsdp_patched:  # every backward: a flag once FSDP1 is wrapped
            fsdp = sys.modules.get("torch.distributed.fsdp")
            cls = getattr(fsdp, "FullyShardedDataParallel", None)
            if cls is not None:
                self._fsdp_patched = True
                self._patcher.patch(cls, "clip_grad_norm_", self._wrap_fsdp)
        if not self._deepspeed_patched:
            engine = sys.modules.get("deepspeed.runtime.engine")
            cls = getattr(engine, "DeepSpeedEngine", None)
            if engine is not None and cls is not None and hasattr(cls, "_take_model_step"):
                self._deepspeed_patched = True
                self._patcher.patch(cls, "_take_model_step", self._wrap_deepspeed_step)
                if callable(getattr(engine, "clip_grad_norm_", None)):
                    self._patcher.patch(engine, "clip_grad_norm_", self._wrap_deepspeed_clip)

    def _wrap_deepspeed_clip(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def clip_grad_norm_(*args: Any, **kwargs: Any) -> Any:
            total = orig(*args, **kwargs)
            probe._ds_norm = total  # before the optimizer steps: reported by the step's wrapper
            return total

        return clip_grad_norm_

    def _wrap_deepspeed_step(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def _take_model_step(engine: Any, *args: Any, **kwargs: Any) -> Any:
            step = probe.s.clock.current_step  # the optimizer steps inside: the step it takes
            probe._ds_norm = None
            probe._patcher.guard(probe.name, probe._before_deepspeed_step, engine, step)
            probe.s.framework_step = set()  # ZeRO steps torch's optimizer once per group: one step
            try:
                out = orig(engine, *args, **kwargs)
            finally:
                probe.s.framework_step = None
            probe._patcher.guard(probe.name, probe._after_deepspeed_step, engine, step)
            return out

        return _take_model_step

    def _before_deepspeed_step(self, engine: Any, step: int) -> None:
        if engine not in self._ds_engines:
            self._ds_engines[engine] = True
            self._adopt_deepspeed(engine)
        if float(engine.gradient_clipping()) > 0:
            # The gradients the step's own measurement reads are clipped already; the norm
            # before clipping comes after the step (ZeRO, bf16, fp16 compute it inside).
            self.s.stream.clip_pending(step)

    def _adopt_deepspeed(self, engine: Any) -> None:
        """DeepSpeed's bf16 / fp16 / ZeRO optimizers step fp32 copies of the model's parameters
        and copy them back: the model's parameters are held (by the engine), and copies kept one
        per parameter (fp16/bf16 without ZeRO) are named after theirs. A flat ZeRO partition is
        measured as the parameters it holds (live/zero.py). ZeRO holds the parameters that were
        trainable when it was built: one unfrozen later is held by nothing."""
        params = dict(engine.module.named_parameters())
        zero = read_zero(engine)
        for p in zero.params if zero is not None else params.values():
            self.s.framework_held[p] = True
        name = {p: f"module.{n}" for n, p in params.items()}  # the engine is the model's root
        inner = engine.optimizer
        copies = []
        for low, high in zip(getattr(inner, "fp16_groups", ()) or (), getattr(inner, "fp32_groups", ()) or ()):
            copies += [(c, name[p]) for p, c in zip(low, high) if p in name and c.shape == p.shape]
        self.s.model.name_tensors(copies)
        if zero is not None:
            for flat, pieces in zero.pieces:
                self.s.model.name_pieces(flat, pieces)
            self.s.model.name_groups(zero.optimizer, zero.groups)
        while inner is not None and inner not in self.s.framework_stepped:  # ZeRO's wraps torch's
            self.s.framework_stepped[inner] = True
            inner = getattr(inner, "optimizer", None)

    def _after_deepspeed_step(self, engine: Any, step: int) -> None:
        max_norm = float(engine.gradient_clipping())
        norm, self._ds_norm = self._ds_norm, None
        if norm is None:  # ZeRO / bf16 / fp16: the optimizer computed and kept it
            norm = engine.get_global_grad_norm()
        if not max_norm > 0 or norm is None:
            return
        if isinstance(norm, torch.Tensor):
            norm = local_norm(norm)
            if norm is None:
                return
        self.s.on_clip(norm, max_norm, step=step, via="DeepSpeed's gradient_clipping")

    def _wrap_fsdp(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def clip_grad_norm_(module: Any, max_norm: float, *args: Any, **kwargs: Any) -> Any:
            total = orig(module, max_norm, *args, **kwargs)
            handles = getattr(module, "_all_handles", None)
            # Nothing sharded: FSDP called torch's clip_grad_norm_ (counted through the dispatcher).
            if handles and any(getattr(h, "uses_sharded_strategy", False) for h in handles):
                probe._patcher.guard(probe.name, probe._on_clip, total, max_norm,
                                     "FullyShardedDataParallel.clip_grad_norm_")
            return total

        return clip_grad_norm_

    def _before_clip(self, call: ClipCall) -> None:
        self._patcher.ops.settle()  # after the backward: the clip runs without the mode

    def _after_clip(self, call: ClipCall) -> None:
        if call.fn == "clip_grad_norm_":  # torch measured this norm for this call: one clipping
            self.s.on_clip(call.norm, call.limit, scale=call.scale)
        elif call.fn == "clip_grads_with_norm_":
            self._on_clip(call.norm, call.limit, call.fn, call.scale)

    def _on_clip(self, total_norm: Any, max_norm: float, via: str, scale: torch.Tensor | None = None) -> None:
        norm = local_norm(total_norm)
        if norm is None:
            return
        this = (self.s.clock.current_step, float(max_norm), norm_key(norm))
        if this == self._last:
            return  # another parameter group of the clipping just counted
        self._last, self._last_norm = this, norm
        self.s.on_clip(norm, float(max_norm), via=via, scale=scale)
