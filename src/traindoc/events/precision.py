"""Mixed precision: GradScaler steps, clipping under a scale, autocast coverage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class GradScale:
    """An AMP GradScaler's ``update()`` (live): the scale it set and whether the optimizer step
    it closes was skipped (``scaler.step`` found Inf/NaN gradients and did not call
    ``optimizer.step()``). ``initial`` is the scaler's init_scale. On sampled skipped steps,
    ``nan``/``inf`` name the parameters whose gradients held NaN / Inf (empty when not
    measured). ``optimizer`` is the class stepped through the scaler, ``where`` the ``file:line``
    of ``scaler.step``."""

    step: int
    scale: float
    skipped: bool
    initial: float = 65536.0
    nan: tuple[str, ...] = ()
    inf: tuple[str, ...] = ()
    optimizer: str = ""
    where: str = ""
    signal: ClassVar[str] = "amp"

@dataclass(frozen=True)
class ScaledClip:
    """A gradient clip that ran on gradients still multiplied by an AMP GradScaler's scale
    (live): ``clip_grad_norm_``/``clip_grad_value_`` before ``scaler.unscale_(optimizer)``.
    ``max_norm`` is the max_norm (or clip_value) passed, ``norm`` the total norm the clip
    measured on the scaled gradients (None for clip_grad_value_), ``scale`` the scale."""

    step: int
    fn: str
    max_norm: float
    scale: float
    norm: float | None = None
    where: str = ""
    signal: ClassVar[str] = "amp"

@dataclass(frozen=True)
class AutocastCheck:
    """One sampled step of a mixed-precision run (an autocast region was active in a forward,
    or a GradScaler scaled the loss) (live): the matmul-heavy modules (Linear, Conv, attention,
    RNN) of its training forward passes. ``fp32`` names those whose outputs stayed float32 with
    float32 weights (``fp32_numel`` their parameters, of ``numel`` for all ``modules``).
    ``autocast`` lists the autocast regions seen active during the forward ("cpu:bfloat16"),
    ``scaler`` says a GradScaler was in use. ``reason`` for the fp32 modules: "outside" (no
    autocast active where they ran), "device" (autocast active for another device than theirs,
    ``device``), "thread" (they ran in another thread, where autocast state is not inherited)
    or "ignored" (autocast active for their device, but their op did not go through it)."""

    step: int
    autocast: tuple[str, ...]
    scaler: bool
    modules: int
    numel: int
    fp32: tuple[str, ...] = ()
    fp32_numel: int = 0
    device: str = ""
    reason: str = ""
    signal: ClassVar[str] = "autocast"
