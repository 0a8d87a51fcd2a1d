"""expert-collapse: a mixture-of-experts router sends most tokens to a few experts."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import ClassVar, Iterable, Mapping

from traindoc.detectors import _carry
from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar
from traindoc.findings import Finding


# What carries over a resume (Engine.state_dict): the window of Gini values, the router entropy,
# and where it fired, peaked and ended.
_CARRIED = ("_recent", "_entropy", "_entropy_at_fire", "_fired", "_last", "_peak", "_high")


class ExpertCollapse:
    """The Gini coefficient of the expert load (0 = even, (E-1)/E = all tokens on one expert),
    as a median over the last ``window`` logged values, stays at or above ``gini``. For E = 8,
    all tokens on 2 experts gives 0.75 and on 4 experts 0.5; seed 000 calls 0.30 to 0.40+
    healthy. The router entropy, when logged, is quoted as evidence: exp(H) is the number of
    evenly loaded experts with the same entropy (H in nats), and H / ln(E) is given when
    ``experts`` is set. Values outside [0, 1] are left to metric-out-of-range.
    """

    id: ClassVar[str] = "expert-collapse"
    needs: ClassVar[frozenset[str]] = frozenset({"expert_gini"})
    uses: ClassVar[frozenset[str]] = frozenset({"expert_entropy"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("fixtures/logs/golden/expert_collapse.jsonl", 13),
        Example("fixtures/logs/golden/healthy_moe.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        gini: float = 0.6
        window: int = 5
        min_points: int = 3
        experts: int | None = None  # E, to normalize the entropy

        def __post_init__(self) -> None:
            if not 0 < self.gini < 1:
                raise ValueError(f"gini must be in (0, 1), got {self.gini}")
            if self.window < 1 or not 1 <= self.min_points <= self.window:
                raise ValueError("need window >= 1 and 1 <= min_points <= window")
            if self.experts is not None and self.experts < 2:
                raise ValueError(f"experts must be >= 2, got {self.experts}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._recent: deque[float] = deque(maxlen=self.config.window)
        self._entropy: float | None = None
        self._entropy_at_fire: float | None = None
        self._fired: tuple[int, float] | None = None
        self._last: tuple[int, float] = (0, math.nan)
        self._peak: tuple[int, float] = (0, -math.inf)
        self._high = 0  # logged values at or above the threshold since firing

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``_CARRIED``)."""
        return _carry.save(self, _CARRIED)

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        _carry.load(self, state, _CARRIED)

    def observe(self, event: Event) -> Iterable[Finding]:
        assert isinstance(event, Scalar)
        x = event.value
        if not math.isfinite(x):
            return ()
        if event.name == "expert_entropy":
            self._entropy = x
            return ()
        if not 0.0 <= x <= 1.0:
            return ()
        self._recent.append(x)
        self._last = (event.step, x)
        if x > self._peak[1]:
            self._peak = (event.step, x)
        if self._fired is not None:
            self._high += x >= self.config.gini
            return ()
        if len(self._recent) < self.config.min_points:
            return ()
        m = median(list(self._recent))
        if m < self.config.gini:
            return ()
        self._fired = (event.step, m)
        self._entropy_at_fire = self._entropy
        self._high = sum(v >= self.config.gini for v in self._recent)
        return (self._finding(),)

    def finish(self) -> Iterable[Finding]:
        return (self._finding(),) if self._fired is not None else ()

    def _entropy_text(self, h: float | None) -> str:
        if h is None:
            return ""
        text = f"; router entropy {fmt(h)} (exp(H) = {fmt(math.exp(min(h, 50)))} evenly loaded experts if in nats"
        if self.config.experts:
            text += f", H/ln(E) = {fmt(h / math.log(self.config.experts))} for E={self.config.experts}"
        return text + ")"

    def _finding(self) -> Finding:
        assert self._fired is not None
        step, m = self._fired
        cfg = self.config
        last_step, last = self._last
        return finding(
            self.id, step=step,
            message=(
                f"expert load Gini {fmt(m)} at step {step} (median of the last {len(self._recent)} "
                f"logged values; threshold {fmt(cfg.gini)}){self._entropy_text(self._entropy_at_fire)}; "
                f"peak {fmt(self._peak[1])} at step {self._peak[0]}, last {fmt(last)} at step "
                f"{last_step}; {self._high} logged values at or above the threshold."
            ),
            evidence={"gini": m, "threshold": cfg.gini, "peak": self._peak[1], "peak_step": self._peak[0],
                      "last": last, "entropy": self._entropy_at_fire, "high_values": self._high},
        )
