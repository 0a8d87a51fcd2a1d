"""tiny-updates: the relative update size is far below the healthy band for the whole run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Event, Optimizer, ParamStats, Scalar
from traindoc.findings import Finding

# Usual LR ranges (from-scratch training) by optimizer class, for the fix.
USUAL_LR = {
    "Adam": "1e-4 to 3e-3", "AdamW": "1e-4 to 3e-3", "Adamax": "1e-4 to 3e-3", "NAdam": "1e-4 to 3e-3",
    "RAdam": "1e-4 to 3e-3", "SGD": "1e-3 to 1e-1", "Muon": "1e-3 to 2e-2 (torch.optim.Muon's default is 1e-3)",
    "RMSprop": "1e-4 to 1e-2", "Adagrad": "1e-3 to 1e-1", "Adafactor": "1e-3 to 1e-2",
}


class TinyUpdates:
    """Per optimizer parameter group, the median relative update ||dw||/||w|| per step over the
    second half of the run is far below the healthy band (about 1e-4 to 1e-2; 1e-3 typical):
    below ``far``, or below ``floor`` while the loss improved by less than ``progress`` (small
    updates that still make progress, as in a low-LR fine-tune, are fine). Groups with LR
    exactly 0 and parameters that never moved belong to frozen-parameters. Judged at the end."""

    id: ClassVar[str] = "tiny-updates"
    needs: ClassVar[frozenset[str]] = frozenset({"params", "optimizer"})
    uses: ClassVar[frozenset[str]] = frozenset({"loss"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("zoo/muon_low_lr.py", 0),
        Example("ckpt/golden/tiny_lr_diff.jsonl", -1),
        Example("ckpt/golden/bf16_norms_frozen_diff.jsonl", None),
        Example("zoo/healthy_muon.py", None),
        Example("zoo/healthy_gpt.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        floor: float = 1e-4
        far: float = 1e-5
        progress: float = 0.1  # relative loss improvement over the run
        min_steps: int = 10

        def __post_init__(self) -> None:
            if not 0 < self.far <= self.floor:
                raise ValueError(f"need 0 < far <= floor, got far={self.far}, floor={self.floor}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._opt: dict[int, Optimizer] = {}
        self._lr: dict[tuple[int, int], float] = {}
        self._ratios: dict[tuple[int, int], list[tuple[int, float]]] = {}
        self._moved: set[tuple[int, int]] = set()
        self._losses: list[float] = []
        self._span: dict[tuple[int, int], int] = {}

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Scalar):
            if event.value == event.value and abs(event.value) != float("inf"):
                self._losses.append(event.value)
            return iter(())
        if isinstance(event, Optimizer):
            self._opt[event.index] = event
            for g in event.groups:
                self._lr[(event.index, g.index)] = g.lr
            return iter(())
        assert isinstance(event, ParamStats)
        if event.optimizer < 0 or event.update is None or not event.requires_grad or event.has_grad is False:
            return iter(())
        if event.update != event.update:
            return iter(())
        key = (event.optimizer, event.group)
        # A checkpoint diff spans ``steps`` optimizer steps: its per-step share of the change.
        self._ratios.setdefault(key, []).append((event.step, event.update / max(event.steps, 1)))
        self._span[key] = max(self._span.get(key, 0), event.steps)
        if event.update > 0:
            self._moved.add(key)
        return iter(())

    def _progress(self) -> float | None:
        """Relative improvement of the loss (10-step medians, start against end); None if unknown."""
        if len(self._losses) < 20:
            return None
        first, last = median(self._losses[:10]), median(self._losses[-10:])
        return (first - last) / abs(first) if first else None

    def finish(self) -> Iterator[Finding]:
        cfg = self.config
        progress = self._progress()
        stuck = progress is not None and progress < cfg.progress
        low: list[tuple[tuple[int, int], float, int]] = []
        for key, series in self._ratios.items():
            steps = sorted({s for s, _ in series})
            observed = max(len(steps), self._span.get(key, 1))
            if observed < cfg.min_steps or key not in self._moved or self._lr.get(key, 1.0) == 0:
                continue
            half = steps[len(steps) // 2]
            ratio = median([r for s, r in series if s >= half])
            if ratio < cfg.far or (ratio < cfg.floor and stuck):
                low.append((key, ratio, steps[0]))
        if not low:
            return
        parts, fixes = [], []
        for (oi, gi), ratio, _ in low:
            opt = self._opt.get(oi)
            cls = opt.cls if opt else "optimizer"
            lr = self._lr.get((oi, gi), float("nan"))
            parts.append(f"{cls} group {gi} (lr {fmt(lr)}): median ||dw||/||w|| {fmt(ratio)} per step")
            fixes.append(f"{cls}: usual LR {USUAL_LR.get(cls, 'see its documentation')}, you have {fmt(lr)}")
        yield finding(
            self.id, step=min(s for _, _, s in low),
            message=(
                "; ".join(parts) + " over the second half of the run (healthy band about 1e-4 to "
                "1e-2)" + (f"; the loss improved by only {progress:.1%}" if progress is not None else "") + "."
            ),
            fix="Raise the LR into the usual range and check the schedule's values: " + "; ".join(fixes) + ".",
            evidence={"groups": [f"optimizer {o} group {g}" for (o, g), _, _ in low],
                      "median_update_ratio": [r for _, r, _ in low], "floor": cfg.floor, "far": cfg.far,
                      "loss_improvement": progress},
        )
