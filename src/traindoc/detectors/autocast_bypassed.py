"""autocast-bypassed: in a mixed-precision run, matmul-heavy modules still produce fp32 outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, names, require
from traindoc.events import AutocastCheck, Event
from traindoc.findings import Finding

_CAUSE = {
    "outside": (
        "No autocast region was active where these modules ran: the forward is called before the "
        "`with torch.autocast(...)` block (only the loss is inside it), or it runs inside an "
        "`autocast(enabled=False)` region or a `custom_fwd(cast_inputs=torch.float32)` function "
        "that covers more than intended."
    ),
    "device": (
        "Autocast is active for another device than the one the modules run on (e.g. "
        "torch.autocast(\"cpu\") around a model on CUDA): autocast only changes ops of its own "
        "device type."
    ),
    "thread": (
        "The modules ran in another thread (nn.DataParallel replicas, a thread pool): autocast "
        "state is thread-local, so the worker threads run without it."
    ),
    "custom_fwd": (
        "A custom autograd.Function decorated with `@custom_fwd(cast_inputs=torch.float32)` "
        "turns autocast off inside its forward and casts its inputs and weights to float32: a "
        "fused kernel written that way runs the layers it covers in float32 (Lightning issue 725)."
    ),
    "ignored": (
        "Autocast is active for their device, but their op did not go through it: a custom "
        "kernel or extension, or a compiler/graph transform that does not apply autocast to "
        "every op it captures."
    ),
}
_FIX = {
    "outside": (
        "Put the forward inside the autocast block together with the loss: `with "
        "torch.autocast(device_type, dtype=...): out = model(x); loss = loss_fn(out, y)`; narrow "
        "any enabled=False region to the ops that need float32."
    ),
    "device": "Pass the model's device type: torch.autocast(device_type=x.device.type, dtype=...).",
    "custom_fwd": (
        "Decorate the Function's forward with `@custom_fwd(device_type=...)` without "
        "cast_inputs, so its ops follow the caller's autocast, and cast to float32 only inside "
        "it, around the ops that need it (a reduction, a softmax)."
    ),
    "thread": (
        "Prefer DistributedDataParallel over nn.DataParallel; otherwise enter autocast inside "
        "the model's forward (decorate forward with torch.autocast(...))."
    ),
    "ignored": (
        "Cast inputs and weights explicitly around the custom op, or apply autocast inside the "
        "compiled/transformed function; enable TF32 for what stays float32: "
        "torch.set_float32_matmul_precision(\"high\")."
    ),
}


class AutocastBypassed(Detector):
    """On at least ``confirm`` sampled steps of a mixed-precision run (an autocast region was
    active in a training forward, or a GradScaler scaled the loss), matmul-heavy modules
    (Linear, Conv, attention) holding at least ``min_share`` of those modules' parameters ran
    with float32 weights and produced float32 outputs. Small float32 heads (a router, the LM
    head kept in fp32 on purpose) stay below the share."""

    id = "autocast-bypassed"
    needs = frozenset({"autocast"})
    examples = (
        Example("live_amp_ckpt/golden/autocast_outside.jsonl", 0),
        Example("live_amp_ckpt/golden/autocast_applied.jsonl", None),
    )

    # Carried over a resume: the sampled steps checked and those that ran matmuls in float32 (counts
    # towards confirm), the first and latest of them.
    carry = ("_bad", "_checked", "_first", "_last")

    @dataclass(frozen=True)
    class Config:
        min_share: float = 0.25  # of the matmul-heavy modules' parameters
        confirm: int = 2  # sampled steps

        def __post_init__(self) -> None:
            require(self, min_share="(0, 1]", confirm=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        # Steps at or above the share: the first, the latest, how many.
        self._first: AutocastCheck | None = None
        self._last: AutocastCheck | None = None
        self._bad = 0
        self._checked = 0

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, AutocastCheck)
        if not event.numel:
            return
        self._checked += 1
        if event.fp32_numel / event.numel >= self.config.min_share:
            self._first = self._first or event
            self._last = event
            self._bad += 1
            if self._bad == self.config.confirm:
                yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._bad >= self.config.confirm:
            yield self._finding()

    def _finding(self) -> Finding:
        first, last = self._first, self._last
        assert first is not None and last is not None
        share = last.fp32_numel / last.numel
        reason = last.reason if last.reason in _CAUSE else "outside"
        if last.autocast:
            context = f"autocast active for {', '.join(last.autocast)}"
        else:
            context = "a GradScaler in use but no autocast region active in any forward"
        where = {"outside": " outside any autocast region", "thread": " in another thread",
                 "device": f" on {last.device}, where no autocast is active",
                 "ignored": f" although autocast was active for {last.device}",
                 "custom_fwd": " inside custom_fwd(cast_inputs=torch.float32) Functions"}[reason]
        return finding(
            self.id, step=first.step,
            message=(
                f"In this mixed-precision run ({context}), {len(last.fp32)} of {last.modules} "
                f"matmul-heavy modules ran in float32{where}, {share:.0%} of their parameters "
                f"({last.fp32_numel:,} of {last.numel:,}; threshold {self.config.min_share:.0%}), on "
                f"{self._bad} of {self._checked} sampled steps from step {first.step}: "
                f"{names(list(last.fp32))}."
            ),
            cause=_CAUSE[reason] + " Nothing fails: those layers just run at float32 speed and memory.",
            fix=_FIX[reason] + " If they are kept in float32 on purpose, ignore this id.",
            evidence={
                "fp32_modules": list(last.fp32[:30]), "fp32_params": last.fp32_numel,
                "matmul_params": last.numel, "share": share, "threshold": self.config.min_share,
                "modules": last.modules, "autocast": list(last.autocast), "grad_scaler": last.scaler,
                "reason": reason, "device": last.device, "steps": self._bad,
                "sampled_steps": self._checked,
            },
            where=list(last.fp32[:10]),
        )
