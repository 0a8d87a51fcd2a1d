"""grad-scaler-collapse: the AMP GradScaler's scale keeps falling or most steps are skipped."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names, require
from traindoc.events import Event, GradScale, Optimizer
from traindoc.findings import Finding


class GradScalerCollapse(Detector):
    """``torch.amp.GradScaler`` halves its scale and skips ``optimizer.step()`` whenever the
    gradients hold Inf or NaN. Fires when the scale falls below ``min_scale`` (the gradients
    overflow fp16 even unscaled, or hold NaN that no scale fixes), or when, after the initial
    back-off (the skips before the first completed step, while the scale calibrates from 65536),
    at least ``rate`` of ``window`` consecutive steps were skipped (judged at the end on at least
    ``min_updates`` steps when the run is shorter than a window)."""

    id = "grad-scaler-collapse"
    needs = frozenset({"amp"})
    uses = frozenset({"optimizer"})
    examples = (
        Example("zoo/amp_scaler_collapse.py", -1),
        Example("zoo/healthy_amp.py", None),
        Example("zoo/amp_clip_before_unscale.py", None),
    )

    # Carried over a resume: the scale's history, the skip window and counts, and whether the
    # initial back-off is over (a restored GradScaler does not back off again).
    carry = ("_recent", "_calibrating", "_initial_skips", "_updates", "_skipped", "_initial",
                "_scale", "_lowest", "_series", "_nan", "_inf", "_optimizer", "_lr", "_where",
                "_first", "_why", "_fall_start")

    @dataclass(frozen=True)
    class Config:
        min_scale: float = 1.0  # a scale below this means the gradients overflow or are NaN
        rate: float = 0.5  # share of skipped steps in a window
        window: int = 20
        min_updates: int = 10  # steps judged at the end of a run shorter than a window

        def __post_init__(self) -> None:
            require(self, rate="(0, 1]", window=">= 2")
            if not 1 <= self.min_updates <= self.window:
                raise ValueError(f"min_updates must be in [1, window], got {self.min_updates}")
            require(self, min_scale="> 0")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._recent: deque[tuple[int, bool]] = deque(maxlen=self.config.window)
        self._calibrating = True
        self._initial_skips = 0
        self._updates = 0
        self._skipped = 0
        self._initial = 65536.0
        self._scale = 65536.0
        self._lowest = float("inf")
        self._series: list[tuple[int, float]] = []
        self._nan: dict[str, None] = {}
        self._inf: dict[str, None] = {}
        self._optimizer = ""
        self._lr: float | None = None
        self._where = ""
        self._first: int | None = None
        self._why = ""
        self._fall_start: int | None = None  # first skip since the scale last grew

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Optimizer):
            if self._lr is None and event.groups:
                self._optimizer, self._lr = event.cls, event.groups[0].lr
            return
        if not isinstance(event, GradScale):
            return  # a ScaledClip: clip-before-unscale's
        cfg = self.config
        self._updates += 1
        self._skipped += event.skipped
        self._initial, self._where = event.initial, event.where or self._where
        self._optimizer = self._optimizer or event.optimizer
        if self._series and event.scale > self._series[-1][1]:
            self._fall_start = None  # the scale grew: a new fall starts at the next skip
        if event.skipped and self._fall_start is None:
            self._fall_start = event.step
        if not self._series or self._series[-1][1] != event.scale:
            self._series.append((event.step, event.scale))
            if len(self._series) > 200:
                del self._series[1:101]  # keep the first and the latest changes
        self._scale = event.scale
        self._lowest = min(self._lowest, event.scale)
        self._nan.update(dict.fromkeys(event.nan))
        self._inf.update(dict.fromkeys(event.inf))
        if self._calibrating and event.skipped:
            self._initial_skips += 1
            self._recent.append((event.step, True))
        elif self._calibrating:
            self._calibrating = False  # the first completed step ends the initial back-off
            self._recent.clear()
            self._recent.append((event.step, False))
        else:
            self._recent.append((event.step, event.skipped))
        if self._first is not None:
            return
        if event.scale < cfg.min_scale:
            self._fire("scale")
            yield self._finding()
        elif not self._calibrating and len(self._recent) == cfg.window and self._rate() >= cfg.rate:
            self._fire("rate")
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        cfg = self.config
        if (self._first is None and not self._calibrating and len(self._recent) >= cfg.min_updates
                and self._rate() >= cfg.rate):
            self._fire("rate")
        if self._first is not None:
            yield self._finding()

    def _rate(self) -> float:
        return sum(s for _, s in self._recent) / len(self._recent) if self._recent else 0.0

    def _fire(self, why: str) -> None:
        skips = [step for step, skipped in self._recent if skipped]
        if why == "scale" and self._fall_start is not None:
            self._first = self._fall_start  # where the scale began to fall
        else:
            self._first = skips[0] if skips else (self._series[-1][0] if self._series else 0)
        self._why = why

    def _finding(self) -> Finding:
        cfg = self.config
        share = self._skipped / self._updates if self._updates else 0.0
        after = self._skipped - self._initial_skips
        nan, inf = list(self._nan), list(self._inf)
        opt = f"{self._optimizer} (lr {fmt(self._lr)})" if self._optimizer and self._lr is not None else (
            self._optimizer or "the optimizer")
        at = f" at {self._where}" if self._where else ""
        if nan:
            seen = (f" On sampled skipped steps the gradients held NaN (not only Inf), in {names(nan)}: a "
                    "numerical bug that no scale can fix, not an fp16 overflow.")
            cause = (
                "NaN gradients on most steps: an op whose backward is 0/0 or 0*inf, such as sqrt or a "
                "norm at 0 (pairwise distances of identical points), log of 0, pow of a negative "
                "base, a division by a zero norm, or fully masked softmax rows. The forward loss can "
                "look finite. The GradScaler hides it: each step with a NaN gradient is skipped and "
                "the scale halved, so training runs on the few clean steps while the scale sinks."
            )
            fix = (
                f"Find the op: run one step with torch.autograd.set_detect_anomaly(True), or check "
                f"which gradients are NaN after scaler.unscale_(optimizer). Make it safe at 0: add an "
                f"eps inside the root or log (torch.sqrt(x + 1e-12)), use torch.cdist / "
                f"F.pairwise_distance / F.normalize (which handle 0), and mask before the op rather "
                f"than after it. Then the scaler{at} stops skipping {opt}'s steps."
            )
        else:
            seen = (f" On sampled skipped steps the gradients held Inf (no NaN) in {names(inf)}."
                    if inf else "")
            cause = (
                "Inf/NaN gradients on most steps: values beyond float16's range (max 65504) in the "
                "backward or the forward: unnormalized inputs or targets, unscaled attention logits, "
                "a growing residual stream, exp of large values, or an LR so high that weights "
                "grow; or a numerical bug that makes NaN (see nonfinite). Each such step is skipped "
                "and the scale halved, so little or no training happens."
            )
            fix = (
                f"On Ampere or newer GPUs use bf16 autocast, which needs no scaler. Otherwise find the "
                f"first non-finite gradient (check them after scaler.unscale_(optimizer), or "
                f"torch.autograd.set_detect_anomaly(True) for one step) and keep that op in float32 "
                f"(torch.autocast(..., enabled=False) around it); normalize inputs; lower {opt}'s LR "
                f"or add warmup. The scaler is stepped{at}."
            )
        why = (f"its scale fell below {fmt(cfg.min_scale)}" if self._why == "scale"
               else f"at least {cfg.rate:.0%} of {cfg.window} consecutive steps were skipped")
        return finding(
            self.id, step=self._first,
            message=(
                f"The GradScaler skipped {self._skipped} of {self._updates} optimizer steps ({share:.0%}; "
                f"{self._initial_skips} before the first completed step, {after} after) and its scale "
                f"fell from {fmt(self._initial)} to "
                f"{fmt(self._scale)} (lowest {fmt(self._lowest)}); fired because {why}, starting at "
                f"step {self._first}.{seen}"
            ),
            cause=cause, fix=fix,
            evidence={
                "skipped": self._skipped, "updates": self._updates, "skip_rate": share,
                "initial_back_off": self._initial_skips, "initial_scale": self._initial,
                "scale": self._scale, "lowest_scale": self._lowest, "min_scale": cfg.min_scale,
                "rate_threshold": cfg.rate, "window": cfg.window,
                "scale_steps": [s for s, _ in self._series[-40:]],
                "scales": [v for _, v in self._series[-40:]],
                "nan_gradients": nan[:20], "inf_gradients": inf[:20],
                "optimizer": self._optimizer, "where": self._where,
            },
            where=[w for w in (self._where,) if w] + nan[:5],
        )
