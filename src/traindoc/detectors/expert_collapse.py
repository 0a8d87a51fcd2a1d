"""expert-collapse: a mixture-of-experts router sends most tokens to a few experts."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt
from traindoc.detectors._maths import median
from traindoc.events import Event, Scalar, Series, scalars
from traindoc.findings import EvidenceValue, Finding


_FIRST = 3  # values that say where a statistic started


class ExpertCollapse(Detector):
    """The expert load concentrates on a few experts, judged from whichever statistic the run
    logs, each as a median over the last ``window`` values:

    - per-expert loads (token counts or shares, one column per expert: ``expert_3_load``,
      ``moe/frac_e3``; ``loads`` names them, the logs face fills it): the Gini coefficient of
      the shares at each step, scaled by E/(E-1) so that 1 means every token on one expert
      whatever E, reaches ``gini``; per MoE layer when the columns name layers;
    - a logged load Gini (0 = even, (E-1)/E = all tokens on one expert) reaches ``gini``. For
      E = 8, all tokens on 2 experts gives 0.75 and on 4 experts 0.5; seed 000 calls 0.30 to
      0.40+ healthy;
    - a logged Gini that has gone negative, which no load Gini can, and keeps falling to
      ``-neg_gini``: seed 000's own red flag ("Gini becoming increasingly negative (<-0.3)",
      "check the MoE router"), whatever sign convention its code computes;
    - the router entropy (in nats or normalized by ln E; a negated entropy is read as such)
      falls to ``entropy_ratio`` of where it started: exp(H) is the number of evenly loaded
      experts with the same entropy, so halving H in nats leaves the square root of them.

    The router entropy, when logged, is quoted as evidence; H / ln(E) is given when ``experts``
    is set or the loads tell E. Balanced experts (shares near 1/E, a flat or slowly falling
    entropy as experts specialize) stay quiet.
    """

    id = "expert-collapse"
    # no needs: any one of uses (an instance adds the loads)
    uses = frozenset({"expert_gini", "expert_entropy"})
    examples = (
        Example("fixtures/logs/golden/expert_collapse.jsonl", 13),
        Example("fixtures/logs/meaning/moe_expert_loads_collapse.csv", 380),
        Example("fixtures/logs/meaning/moe_frac_collapse.jsonl", 1080),
        Example("fixtures/logs/meaning/moe_router_entropy_collapse.csv", 42),
        Example("fixtures/logs/seeds/seed000_red_flags.csv", 49),
        Example("fixtures/logs/golden/healthy_moe.jsonl", None),
        Example("fixtures/logs/meaning/moe_expert_loads_balanced.csv", None),
        Example("fixtures/logs/meaning/moe_frac_balanced.jsonl", None),
        Example("fixtures/logs/seeds/seed000_healthy.csv", None),
    )

    # Carried over a resume: the windows of Gini values (logged, and computed from per-expert loads
    # per layer), the router entropy's start and window, the loads of the step being gathered, and
    # where it fired, peaked and ended.
    carry = ("_recent", "_gini_first", "_entropy", "_entropy_first", "_entropy_recent", "_entropy_at_fire",
                "_loads", "_pending", "_pending_step", "_shares", "_fired", "_kind", "_last", "_peak", "_high",
                "_group")

    @dataclass(frozen=True)
    class Config:
        gini: float = 0.6
        window: int = 5
        min_points: int = 3
        experts: int | None = None  # E, to normalize the entropy
        neg_gini: float = 0.3  # seed 000's red flag: a Gini increasingly negative below -0.3
        entropy_ratio: float = 0.5  # the router entropy this share of where it started
        loads: tuple[str, ...] = ()  # per-expert load signals, "expert_load.K" / "expert_load.GROUP.K"

        def __post_init__(self) -> None:
            object.__setattr__(self, "loads", tuple(self.loads))  # a TOML list is fine too
            if not 0 < self.gini < 1:
                raise ValueError(f"gini must be in (0, 1), got {self.gini}")
            if self.window < 1 or not 1 <= self.min_points <= self.window:
                raise ValueError("need window >= 1 and 1 <= min_points <= window")
            if self.experts is not None and self.experts < 2:
                raise ValueError(f"experts must be >= 2, got {self.experts}")
            if not 0 < self.neg_gini < 1 or not 0 < self.entropy_ratio < 1:
                raise ValueError("neg_gini and entropy_ratio must be in (0, 1)")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        if self.config.loads:
            # Per instance: the per-expert loads are routed to it too.
            self.uses = type(self).uses | frozenset(self.config.loads)
        w = self.config.window
        self._recent: deque[float] = deque(maxlen=w)  # logged Gini
        self._gini_first: list[float] = []
        self._entropy: float | None = None
        self._entropy_first: list[float] = []
        self._entropy_recent: deque[float] = deque(maxlen=w)
        self._entropy_at_fire: float | None = None
        self._loads: dict[str, deque[float]] = {}  # layer group -> its scaled Gini per step
        self._pending: dict[str, float] = {}  # the loads of the step being gathered
        self._pending_step = -1
        self._shares: dict[str, list[float]] = {}  # group -> the latest step's shares
        self._fired: tuple[int, float] | None = None
        self._kind = ""  # what fired: loads, gini, negative-gini, entropy
        self._group = ""
        self._last: tuple[int, float] = (0, math.nan)
        self._peak: tuple[int, float] = (0, -math.inf)
        self._high = 0  # values past the threshold since firing

    def observe(self, event: Event) -> Iterable[Finding]:
        assert isinstance(event, Scalar)
        x, name, step = event.value, event.name, event.step
        if not math.isfinite(x):
            return ()
        out: list[Finding] = []
        if name.startswith("expert_load."):
            if step != self._pending_step:
                out += self._close()
                self._pending_step = step
            self._pending[name] = x
            return out
        if name == "expert_entropy":
            return self._entropy_value(step, x)
        return self._gini_value(step, x)

    def finish(self) -> Iterable[Finding]:
        self._close()
        return (self._finding(),) if self._fired is not None else ()

    # --- the statistics ----------------------------------------------------------------------

    def _gini_value(self, step: int, x: float) -> list[Finding]:
        if len(self._gini_first) < _FIRST:
            self._gini_first.append(x)
        self._recent.append(x)
        if self._kind in ("gini", "negative-gini"):
            self._track(step, x, x >= self.config.gini if self._kind == "gini" else x <= -self.config.neg_gini)
        if self._fired is not None or len(self._recent) < self.config.min_points:
            return []
        m = median(list(self._recent))
        if 0.0 <= x <= 1.0 and m >= self.config.gini:
            return self._fire(step, m, "gini")
        # Seed 000's convention: a Gini that went negative (no load Gini can), every value of
        # the window below 0 and falling, the latest past -neg_gini ("increasingly negative").
        window = list(self._recent)
        if x <= -self.config.neg_gini and max(window) < 0 and window[-1] < window[0]:
            return self._fire(step, x, "negative-gini")
        return []

    def _entropy_value(self, step: int, x: float) -> list[Finding]:
        if len(self._entropy_first) < _FIRST:
            self._entropy_first.append(x)
        # A negated entropy (logged as a loss term to maximize: -H <= 0) is read as H.
        h = -x if median(self._entropy_first) < 0 else x
        self._entropy = h
        self._entropy_recent.append(h)
        start = abs(median(self._entropy_first))
        limit = self.config.entropy_ratio * start
        if self._kind == "entropy":
            self._track(step, h, h <= limit)
        if (self._fired is not None or len(self._entropy_first) < _FIRST
                or len(self._entropy_recent) < self.config.min_points or not start > 0):
            return []
        m = median(list(self._entropy_recent))
        return self._fire(step, m, "entropy") if m <= limit else []

    def _close(self) -> list[Finding]:
        """The loads gathered at one step: each layer group's shares and their scaled Gini."""
        loads, step = self._pending, self._pending_step
        self._pending = {}
        groups: dict[str, list[float]] = {}
        for name, x in sorted(loads.items(), key=lambda kv: _expert_no(kv[0])):
            groups.setdefault(name.rpartition(".")[0], []).append(x)
        out: list[Finding] = []
        for group, xs in groups.items():
            total = sum(xs)
            if len(xs) < 2 or total <= 0 or min(xs) < 0:
                continue
            shares = [v / total for v in xs]
            self._shares[group] = shares
            out += self._group_value(step, group, _gini(shares) * len(shares) / (len(shares) - 1))
        return out

    def _group_value(self, step: int, group: str, g: float,
                     shares: Callable[[], list[float]] | None = None) -> list[Finding]:
        """One step's scaled Gini of a layer group's loads (``shares``: its shares, asked for
        only when it fires; None when ``_shares`` holds them already)."""
        window = self._loads.setdefault(group, deque(maxlen=self.config.window))
        window.append(g)
        if self._kind == "loads" and group == self._group:
            self._track(step, g, g >= self.config.gini)
        if self._fired is None and len(window) >= self.config.min_points:
            m = median(list(window))
            if m >= self.config.gini:
                self._group = group
                if shares is not None:
                    self._shares[group] = shares()
                return self._fire(step, m, "loads")
        return []

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """A delivery of columns. Per-expert loads whose columns share their steps become one
        scaled Gini per step and layer group at once (numpy: a million-step log of 8 experts is
        not 8 million Python calls), merged in step order with the logged Gini and entropy,
        which are judged point by point as ``observe`` does; anything else is replayed."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        groups: dict[str, list[Series]] = {}
        for name, col in columns.items():
            if name.startswith("expert_load."):
                groups.setdefault(name.rpartition(".")[0], []).append(col)
        aligned = all(len(cols) >= 2 and all(np.array_equal(vec.ints(c.steps), vec.ints(cols[0].steps))
                                             for c in cols) for cols in groups.values())
        if self._pending or not groups or not aligned:
            return list(super().observe_series(columns) or ())
        # (step, 0, order, event) for a logged Gini or entropy; (step, 1, row, group) for loads.
        todo: list[tuple[int, int, int, Scalar | str]] = []
        others = [c for name, c in columns.items() if not name.startswith("expert_load.")]
        todo += [(ev.step, 0, k, ev) for k, ev in enumerate(scalars(others))]
        table: dict[str, tuple[list[float], np.ndarray]] = {}  # group -> (scaled Gini per row, shares)
        latest: dict[str, list[float]] = {}
        with np.errstate(all="ignore"):
            for group, cols in groups.items():
                cols.sort(key=lambda c: _expert_no(c.name))
                x = np.vstack([vec.floats(c.values) for c in cols])  # (experts, rows)
                total = x.sum(axis=0)
                ok = np.isfinite(total) & (total > 0) & (x.min(axis=0) >= 0)
                shares = x / np.where(ok, total, 1.0)
                e = len(cols)
                ranks = 2.0 * np.arange(1, e + 1) - e - 1  # the Gini of sorted shares, as _gini
                g = (ranks[:, None] * np.sort(shares, axis=0)).sum(axis=0) / e * e / (e - 1)
                table[group] = (g.tolist(), shares)
                idx = np.flatnonzero(ok)
                todo += [(step, 1, i, group) for i, step in zip(idx.tolist(), vec.ints(cols[0].steps)[idx].tolist())]
                if len(idx):
                    latest[group] = shares[:, idx[-1]].tolist()
        todo.sort(key=lambda t: t[:3])
        out: list[Finding] = []
        for step, kind, i, what in todo:
            if isinstance(what, Scalar):
                out += self.observe(what)
            else:
                gs, sh = table[what]
                out += self._group_value(step, what, gs[i], lambda: sh[:, i].tolist())  # noqa: B023
        self._shares.update(latest)  # the message quotes the latest step's shares
        return out

    def _fire(self, step: int, m: float, kind: str) -> list[Finding]:
        self._fired, self._kind = (step, m), kind
        self._entropy_at_fire = self._entropy
        self._last = self._peak = (step, m)
        self._high = 1
        return [self._finding()]

    def _track(self, step: int, x: float, past: bool) -> None:
        """After firing: the last and most extreme value of what fired, and how many are past."""
        self._last = (step, x)
        worse = x < self._peak[1] if self._kind in ("negative-gini", "entropy") else x > self._peak[1]
        if worse:
            self._peak = (step, x)
        self._high += past

    # --- the finding -------------------------------------------------------------------------

    def _experts(self) -> int | None:
        if self.config.experts:
            return self.config.experts
        shares = self._shares.get(self._group) or next(iter(self._shares.values()), None)
        return len(shares) if shares else None

    def _entropy_text(self, h: float | None) -> str:
        if h is None:
            return ""
        text = f"; router entropy {fmt(h)} (exp(H) = {fmt(math.exp(min(h, 50)))} evenly loaded experts if in nats"
        e = self._experts()
        if e:
            text += f", H/ln(E) = {fmt(h / math.log(e))} for E={e}"
        return text + ")"

    def _finding(self) -> Finding:
        assert self._fired is not None
        step, m = self._fired
        cfg = self.config
        n = cfg.window
        evidence: dict[str, EvidenceValue] = {
            "kind": self._kind, "peak": self._peak[1], "peak_step": self._peak[0], "last": self._last[1],
            "entropy": self._entropy_at_fire, "high_values": self._high}
        tail = (f"; peak {fmt(self._peak[1])} at step {self._peak[0]}, last {fmt(self._last[1])} at step "
                f"{self._last[0]}")
        if self._kind == "loads":
            shares = self._shares.get(self._group, [])
            order = sorted(range(len(shares)), key=lambda i: -shares[i])
            top = ", ".join(f"expert {i} {shares[i]:.0%}" for i in order[:3])
            idle = sum(1 for s in shares if s < 0.1 / len(shares))
            layer = f" in {self._group.removeprefix('expert_load.')}" if "." in self._group else ""
            message = (f"the token shares of {len(shares)} experts{layer} have a Gini of {fmt(m)} at step {step} "
                       f"(median of the last {n} steps, scaled so 1 = every token on one expert; threshold "
                       f"{fmt(cfg.gini)}): {top} at step {self._last[0]}, {idle} expert(s) under a tenth of an even "
                       f"share{self._entropy_text(self._entropy_at_fire)}{tail}; {self._high} steps at or "
                       "above the threshold.")
            evidence.update(gini=m, threshold=cfg.gini, experts=len(shares), shares=shares[:64], idle=idle)
        elif self._kind == "gini":
            message = (f"expert load Gini {fmt(m)} at step {step} (median of the last {n} logged values; "
                       f"threshold {fmt(cfg.gini)}){self._entropy_text(self._entropy_at_fire)}{tail}; "
                       f"{self._high} logged values at or above the threshold.")
            evidence.update(gini=m, threshold=cfg.gini)
        elif self._kind == "negative-gini":
            window = ", ".join(fmt(v) for v in self._recent)
            message = (f"the logged expert Gini fell from {fmt(median(self._gini_first))} at the start to {fmt(m)} "
                       f"at step {step} (the last {n} values {window}; threshold -{fmt(cfg.neg_gini)}): a load Gini "
                       "lies in [0, 1), and seed 000 calls a Gini increasingly negative (< -0.3) the router's "
                       f"red flag{self._entropy_text(self._entropy_at_fire)}{tail}; {self._high} logged values "
                       "at or below the threshold.")
            evidence.update(gini=m, threshold=-cfg.neg_gini)
        else:
            start = abs(median(self._entropy_first))
            e = self._experts()
            normal = f", H/ln(E) = {fmt(m / math.log(e))} for E={e}" if e else ""
            message = (f"router entropy fell from {fmt(start)} to {fmt(m)} at step {step} (median of the last {n} "
                       f"values; threshold {fmt(cfg.entropy_ratio)}x its start, {fmt(cfg.entropy_ratio * start)}): "
                       f"exp(H) = {fmt(math.exp(min(m, 50)))} evenly loaded experts if in nats, down from "
                       f"{fmt(math.exp(min(start, 50)))}{normal}{tail}; {self._high} values at or below the threshold.")
            evidence.update(entropy_start=start, threshold=cfg.entropy_ratio * start, entropy=m)
        if self._recent and "gini" not in evidence:
            evidence["gini"] = median(list(self._recent))
        if self._kind == "negative-gini":
            return finding(
                self.id, step=step, message=message, evidence=evidence,
                cause=("No load distribution gives a negative Gini: the router's statistic is computed with "
                       "another sign convention (seed 000's, where a healthy router reads 0.30-0.40+) or wrongly, "
                       "and its steady fall is the router breaking down, or its statistics."),
                fix=("Check the MoE router (seed 000: SimpleMoELayer) and the Gini's formula (shares sorted "
                     "ascending, sum((2i - E - 1) * share) / E); log each expert's token share (expert_K_load) "
                     "so that the load itself can be judged."))
        return finding(self.id, step=step, message=message, evidence=evidence)


def _gini(shares: list[float]) -> float:
    """The Gini coefficient of shares summing to 1: 0 = even, (E-1)/E = all on one."""
    e = len(shares)
    ordered = sorted(shares)
    return sum((2 * (i + 1) - e - 1) * s for i, s in enumerate(ordered)) / e


def _expert_no(signal: str) -> int:
    tail = signal.rpartition(".")[2]
    return int(tail) if tail.isdigit() else 0
