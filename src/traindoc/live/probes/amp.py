"""The mixed-precision probes: the AMP GradScaler, clipping under it, and autocast coverage.

``torch.amp.GradScaler``'s ``scale`` / ``unscale_`` / ``step`` / ``update`` are wrapped (the
CUDA and CPU GradScaler classes inherit them):

- ``scale(loss)`` registers the scaled loss in ``session.loss_scales``, so the loss signal is
  the user's loss and not loss * 65536, and marks the scaler active until its ``update()``.
- ``step(optimizer)``: when the scaler finds Inf/NaN gradients it does not call
  ``optimizer.step()``, so the optimizer step hooks never fire; the probe then ends the step
  for the session (``on_step_skipped``), keeping steps aligned with the user's loop. On sampled
  skipped steps it notes which gradients hold NaN or Inf.
- ``update()``: one ``GradScale`` event (the new scale, skipped or not). Its tensors are read in
  the session's one batched transfer: no sync of ours (GradScaler itself syncs in ``step``).

A ``clip_grad_norm_`` / ``clip_grad_value_`` / ``clip_grads_with_norm_`` call while a scaler
is active and the optimizer was not unscaled yet sees scaled gradients: a ``ScaledClip``
event, and the session reports that clip's norm divided by the scale. On sampled steps the
autocast coverage (``autocast.py``) is checked. Everything of ours runs under ``patcher.guard``.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Iterable

import torch
from torch.amp.grad_scaler import GradScaler, OptState
from torch.optim.optimizer import register_optimizer_step_post_hook

from traindoc.events import Event, GradScale, ScaledClip
from traindoc.live.probes._clip import ClipCall
from traindoc.live.probes._patch import Patcher, is_traced
from traindoc.live.probes.autocast import AutocastCoverage
from traindoc.live.probes.base import Probe
from traindoc.live.probes.clipping import local_norm, norm_key
from traindoc.live.objects import user_site
from traindoc.live.session import Session

class AmpProbes(Probe):
    name = "amp"
    signals = ("amp", "autocast", "loss", "grad_norm", "step_skipped")
    required = True

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._active: dict[int, Any] = {}  # id(scaler) -> scaler, scale() ran since its update()
        self._opts: dict[int, weakref.ref[Any]] = {}  # optimizers seen by scaler.step / unscale_
        self._hook: Any = None
        self._stepped = False
        self._where = ""
        self._opt_cls = ""
        self._found: torch.Tensor | None = None
        self._nonfinite: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._clip_params: Any = None
        self._clip_scale: torch.Tensor | None = None
        self._clip_sites = 0
        self._clips_heard = False  # listening to clipping (from the first active scaler on)
        # clip_grads_with_norm_ called per parameter group with one norm (see probes/clipping.py):
        # the last one reported, kept alive so that its storage is not reused while compared.
        self._split_clip: tuple[int, tuple[int, int]] | None = None
        self._split_norm: torch.Tensor | None = None
        self.autocast = AutocastCoverage(session, self._run)  # on sampled steps

    def _run(self, fn: Any, *args: Any) -> None:
        self._patcher.guard(self.name, fn, *args)

    def _off(self) -> bool:
        return self.name in self.s.failed or is_traced()

    # ---- install / uninstall -----------------------------------------------------------------
    def install(self) -> None:
        patch = self._patcher.patch
        patch(GradScaler, "scale", self._wrap_scale)
        patch(GradScaler, "unscale_", self._wrap_unscale)
        patch(GradScaler, "step", self._wrap_step)
        patch(GradScaler, "update", self._wrap_update)
        self._patcher.on_backward(self.name, before=self.autocast.on_backward, sampled_only=True)
        if self.s.level.activations and self.clock.sampled:
            self.autocast.on_sampling(True)

    def uninstall(self) -> None:
        self.autocast.close()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._active.clear()

    # ---- GradScaler ------------------------------------------------------------------------------
    def _wrap_scale(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def scale(scaler: Any, outputs: Any) -> Any:
            out = orig(scaler, outputs)
            if getattr(scaler, "_enabled", False):
                probe._run(probe._on_scale, scaler, out)
            return out

        return scale

    def _on_scale(self, scaler: Any, out: Any) -> None:
        if not self._clips_heard:  # a clip can see scaled gradients from now on
            self._clips_heard = True
            self._patcher.clips.listen(self.name, before=self._before_clip, after=self._after_clip)
        self._active[id(scaler)] = scaler
        self.autocast.scaled(self.clock.current_step)
        scale = scaler._scale
        if isinstance(out, torch.Tensor) and out.numel() == 1 and scale is not None and scale.device == out.device:
            self.s.loss_scales[id(out)] = scale  # the session divides at backward(), before update()

    def _wrap_unscale(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def unscale_(scaler: Any, optimizer: Any) -> Any:
            out = orig(scaler, optimizer)
            if getattr(scaler, "_enabled", False):
                probe._run(probe._on_optimizer, optimizer)
            return out

        return unscale_

    def _on_optimizer(self, optimizer: Any) -> None:
        if id(optimizer) not in self._opts and len(self._opts) < 16:
            self._opts[id(optimizer)] = weakref.ref(optimizer)
        self._opt_cls = type(optimizer).__name__

    def _wrap_step(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(scaler, "_enabled", False) or probe._off():
                return orig(scaler, optimizer, *args, **kwargs)
            probe._run(probe._before_step, optimizer)
            probe._stepped = False
            out = orig(scaler, optimizer, *args, **kwargs)
            probe._run(probe._after_step, optimizer)
            return out

        return step

    def _before_step(self, optimizer: Any) -> None:
        if self._hook is None:  # registered on first use: no cost for runs without a scaler
            self._hook = register_optimizer_step_post_hook(self._on_optimizer_stepped)
        self._on_optimizer(optimizer)
        if not self._where:
            self._where = user_site(1)

    def _on_optimizer_stepped(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._stepped = True

    def _after_step(self, optimizer: Any) -> None:
        if self._stepped:
            return
        s = self.s
        s.on_step_skipped(optimizer)  # the hooks did not fire: the scaler skipped this step
        self._patcher.step_ended()
        if not s.clock.sampled:
            return
        step = s.clock.step
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if not params or len({p.grad.device for p in params}) != 1:
            return
        names = [s.model.param_name(p) for p in params]
        with torch.no_grad():
            flags = torch.stack([torch.stack([p.grad.isnan().any(), p.grad.isinf().any()]) for p in params])

        def decode(vals: list[float]) -> Iterable[Event]:
            nan = tuple(n for n, v in zip(names, vals[0::2]) if v)
            inf = tuple(n for n, v in zip(names, vals[1::2]) if v)
            self._nonfinite[step] = (nan, inf)
            return ()

        s.defer(flags.reshape(-1), decode)

    def _wrap_update(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def update(scaler: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(scaler, "_enabled", False) or probe._off():
                return orig(scaler, *args, **kwargs)
            probe._found = None
            probe._run(probe._before_update, scaler)
            out = orig(scaler, *args, **kwargs)
            probe._run(probe._after_update, scaler)
            return out

        return update

    def _before_update(self, scaler: Any) -> None:
        # update() adds the found-inf tensors in place: take their sum first (a device op).
        scale = scaler._scale
        found = [t for st in scaler._per_optimizer_states.values()
                 for t in st.get("found_inf_per_device", {}).values()]
        if scale is None or not found:
            return
        with torch.no_grad():
            self._found = torch.stack([t.reshape(()).float().to(scale.device) for t in found]).sum()

    def _after_update(self, scaler: Any) -> None:
        s = self.s
        self._active.pop(id(scaler), None)
        s.loss_scales.clear()  # scaled losses not handed to backward: never keep stale ids
        scale = scaler._scale
        if scale is None:
            return
        step, found = s.clock.step, self._found
        self._found = None
        with torch.no_grad():  # cat copies: _scale changes in place at the next update()
            parts = [scale.detach().reshape(1).float()]
            if found is not None:
                parts.append(found.reshape(1))
            packed = torch.cat(parts)
        initial = float(getattr(scaler, "_init_scale", 65536.0))
        opt_cls, where = self._opt_cls, self._where

        def decode(vals: list[float]) -> Iterable[Event]:
            nan, inf = self._nonfinite.pop(step, ((), ()))
            yield GradScale(step=step, scale=vals[0], skipped=len(vals) > 1 and vals[1] > 0,
                            initial=initial, nan=nan, inf=inf, optimizer=opt_cls, where=where)

        s.defer(packed, decode)

    # ---- clipping under a scaler -------------------------------------------------------------
    def _before_clip(self, call: ClipCall) -> None:
        self._clip_scale = None
        if not self._active or self._off():  # the usual case: nothing scaled right now
            return
        self._clip_params = call.args[0] if call.args else call.kwargs.get("parameters")
        try:
            self._check_clip()
        finally:  # a generator of parameters read by the check is handed on as a list
            if call.args:
                call.args[0] = self._clip_params
            elif "parameters" in call.kwargs:
                call.kwargs["parameters"] = self._clip_params
            self._clip_params = None
        call.scale = self._clip_scale  # the clipping probe reports the norm divided by it

    def _after_clip(self, call: ClipCall) -> None:
        if call.scale is not None:
            self._on_scaled_clip(call, call.scale)

    def _check_clip(self) -> None:
        """Are the gradients being clipped still multiplied by an active scaler's scale?"""
        for scaler in list(self._active.values()):
            unscaled = {oid for oid, st in scaler._per_optimizer_states.items()
                        if st.get("stage") is not OptState.READY}
            if not unscaled:  # no optimizer of this scaler was unscaled this step
                self._clip_scale = scaler._scale
                return
            known = [o for o in (r() for r in self._opts.values()) if o is not None]
            if len(known) < 2:
                continue  # its one optimizer was unscaled
            params = self._clip_params
            if not isinstance(params, (torch.Tensor, list, tuple)):
                params = self._clip_params = list(params)  # a generator: hand the list on
            first = params if isinstance(params, torch.Tensor) else next(
                (p for p in params if isinstance(p, torch.Tensor)), None)
            owner = next((o for o in known if any(p is first for g in o.param_groups for p in g["params"])), None)
            if owner is not None and id(owner) not in unscaled:
                self._clip_scale = scaler._scale
                return

    def _on_scaled_clip(self, call: ClipCall, scale: torch.Tensor) -> None:
        s = self.s
        step = s.clock.current_step
        norm = call.norm
        if call.fn == "clip_grads_with_norm_":  # the norm is the caller's: measured before the call
            norm = local_norm(norm)
            key = (step, norm_key(norm)) if norm is not None else None
            if key is not None and key == self._split_clip:
                return  # another parameter group of the clipping just reported
            self._split_clip, self._split_norm = key, norm
        where = user_site(1) if self._clip_sites < 3 or s.clock.measuring else ""
        self._clip_sites += 1
        fn, limit = call.fn, call.limit
        with torch.no_grad():
            parts = [scale.detach().reshape(1).float()]
            if isinstance(norm, torch.Tensor):
                parts.append(norm.detach().reshape(1).float().to(scale.device))
            packed = torch.cat(parts)

        def decode(vals: list[float]) -> Iterable[Event]:
            yield ScaledClip(step=step, fn=fn, max_norm=limit, scale=vals[0],
                             norm=vals[1] if len(vals) > 1 else None, where=where)

        s.defer(packed, decode)

    # ---- autocast coverage (sampled steps) -------------------------------------------------------
    def on_sampling(self, on: bool) -> None:
        self.autocast.on_sampling(on)

    def on_sampled_round_end(self, step: int) -> None:
        self.autocast.on_sampled_round_end(step)
