"""expert-collapse: a mixture-of-experts router sends most tokens to a few experts."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, groupby
from typing import TYPE_CHECKING, Iterable, Sequence

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import median
from traindoc.events import Series, scalars
from traindoc.findings import EvidenceValue, Finding

if TYPE_CHECKING:
    import numpy as np  # imported where used: the live face and lint start without numpy


_FIRST = 3  # values that say where a statistic started


class ExpertCollapse(Detector):
    """The expert load concentrates on a few experts, judged from whichever statistic the run
    logs, each as a median over the last ``window`` values:

    - per-expert loads (token counts or shares, one column per expert: ``expert_3_load``,
      ``moe/frac_e3``, read as ``expert_load.K`` by any face): the Gini coefficient of
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
    # no needs: any one of uses, or a per-expert load (reads)
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
    # per layer), the router entropy's start and window, the loads of the last step delivered (the
    # rest of that step may come in the next delivery), and where it fired, peaked and ended.
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

        def __post_init__(self) -> None:
            require(self, gini="(0, 1)")
            if self.window < 1 or not 1 <= self.min_points <= self.window:
                raise ValueError("need window >= 1 and 1 <= min_points <= window")
            if self.experts is not None and self.experts < 2:
                raise ValueError(f"experts must be >= 2, got {self.experts}")
            if not 0 < self.neg_gini < 1 or not 0 < self.entropy_ratio < 1:
                raise ValueError("neg_gini and entropy_ratio must be in (0, 1)")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        w = self.config.window
        self._recent: deque[float] = deque(maxlen=w)  # logged Gini
        self._gini_first: list[float] = []
        self._entropy: float | None = None
        self._entropy_first: list[float] = []
        self._entropy_recent: deque[float] = deque(maxlen=w)
        self._entropy_at_fire: float | None = None
        self._loads: dict[str, deque[float]] = {}  # layer group -> its scaled Gini per step
        self._pending: dict[str, float] = {}  # the loads of the last step delivered, waiting for the rest
        self._pending_step = -1
        self._shares: dict[str, list[float]] = {}  # group -> the latest step's shares
        self._fired: tuple[int, float] | None = None
        self._kind = ""  # what fired: loads, gini, negative-gini, entropy
        self._group = ""
        self._last: tuple[int, float] = (0, math.nan)
        self._peak: tuple[int, float] = (0, -math.inf)
        self._high = 0  # values past the threshold since firing

    def reads(self, signal: str) -> bool:
        return signal.startswith("expert_load.")  # one expert's load, "expert_load.K" / ".GROUP.K"

    def observe_series(self, columns: dict[str, Series]) -> list[Finding]:
        """A delivery of columns (a log's whole, or a live run's cut anywhere). The loads of
        the delivery's last step may be incomplete: they wait in ``_pending`` for the next
        delivery (or ``finish``), so that a step cut in two is judged as one."""
        return self._judge(columns, hold=True)

    def finish(self) -> Iterable[Finding]:
        self._judge({}, hold=False)
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

    # --- one delivery, judged in step order -----------------------------------------------------

    def _judge(self, columns: dict[str, Series], hold: bool) -> list[Finding]:
        """The loads' scaled Gini per step and layer group, computed at once (numpy: a
        million-step log of 8 experts is not 8 million Python calls) and judged as if in step
        order with the logged Gini and entropy, which are judged point by point: at one step,
        the logged values first, then the loads' Gini (groups by name). ``hold``: the loads of
        the last step wait in ``_pending`` (more of them may come)."""
        import numpy as np

        loads = {name: c for name, c in columns.items() if name.startswith("expert_load.")}
        others = [c for name, c in columns.items() if not name.startswith("expert_load.")]
        last: int | None = None  # the delivery's last step: its loads wait when ``hold``
        if hold:
            ends = [c.steps[-1] for c in columns.values() if len(c)] + ([self._pending_step] if self._pending else [])
            last = int(max(ends)) if ends else None
        with np.errstate(all="ignore"):
            rows = self._load_rows(loads, last)
        cfg = self.config
        out: list[Finding] = []
        fire = self._first_high(rows) if self._fired is None else None  # the loads' first judgement past gini
        fired_row = -1
        for ev in scalars(others):
            if fire is not None and ev.step > fire[0]:  # the loads of an earlier step go first
                out += self._fire_loads(rows, *fire)
                fired_row, fire = (fire[2] if self._kind == "loads" else -1), None
            if not math.isfinite(ev.value):
                continue
            found = (self._entropy_value if ev.name == "expert_entropy" else self._gini_value)(ev.step, ev.value)
            if found:  # it fired: its message quotes E from the loads judged before this point
                self._latest_shares(rows, ev.step)
                found = [self._finding()]
            out += found
        if fire is not None:
            out += self._fire_loads(rows, *fire)
            fired_row = fire[2] if self._kind == "loads" else -1
        for group, r in rows.items():
            if self._kind == "loads" and group == self._group:  # after its firing row
                self._track_loads(r.steps[fired_row + 1:], r.gini[fired_row + 1:])
            self._loads.setdefault(group, deque(maxlen=cfg.window)).extend(r.gini[-cfg.window:].tolist())
        self._latest_shares(rows, None)  # the message quotes the latest step's shares
        return out

    def _load_rows(self, loads: dict[str, Series], last: int | None) -> dict[str, _Rows]:
        """Per layer group (by name), the steps whose loads are judged, their scaled Gini and
        shares. An expert's value at a step is its last finite one there; an expert without one
        is absent from that step's shares. A step is judged when at least 2 experts are
        present, their total is > 0 and no load is negative. The ``_pending`` loads come first
        at their step (a later value of an expert there replaces one); the loads at ``last``
        wait in ``_pending``."""
        import numpy as np

        pending, at = self._pending, self._pending_step
        self._pending, self._pending_step = {}, -1
        # Every point of every expert in one array (experts by group, then number), so that a
        # live run's delivery of a step costs a few numpy calls whatever E.
        names = sorted(loads.keys() | pending.keys(), key=_order)
        if not names:
            return {}
        steps: list[Sequence[int]] = []
        values: list[Sequence[float]] = []
        sizes: list[int] = []
        for name in names:
            size = 0
            if name in pending:
                steps.append((at,))
                values.append((pending[name],))
                size = 1
            if name in loads:
                steps.append(loads[name].steps)
                values.append(loads[name].values)
                size += len(loads[name])
            sizes.append(size)
        s = np.concatenate(steps, dtype=np.int64, casting="unsafe")  # an empty list is a float array
        v = np.concatenate(values, dtype=np.float64)
        ends = list(accumulate(sizes))  # expert i's points: ends[i - 1]:ends[i]
        s, v, ends = _kept(s, v, ends, np.isfinite(v))  # a non-finite value: absent
        keep = np.ones(len(s), dtype=bool)  # the last value of a step replaces the others
        keep[:-1] = s[1:] != s[:-1]
        keep[[k - 1 for k in ends[:-1] if k > 0]] = True  # the next point is another expert's
        if last is not None:
            held = np.flatnonzero(keep & (s == last))
            whose = [names[bisect_right(ends, i)] for i in held.tolist()]
            self._pending = dict(zip(whose, v[held].tolist()))
            self._pending_step = last if self._pending else -1
            keep[held] = False
        s, v, ends = _kept(s, v, ends, keep)
        bounds = [0, *ends]  # expert i: bounds[i]:bounds[i + 1]
        out: dict[str, _Rows] = {}
        lo = 0
        for group, members in groupby(names, key=lambda n: n.rpartition(".")[0]):
            hi = lo + len(list(members))  # its experts: lo:hi
            e, b = hi - lo, [k - bounds[lo] for k in bounds[lo:hi + 1]]
            gs, gv = s[bounds[lo]:bounds[hi]], v[bounds[lo]:bounds[hi]]
            lo = hi
            if not len(gs):
                continue
            if b == list(range(0, e * b[1] + 1, b[1] or 1)) and (gs.reshape(e, -1) == gs[:b[1]]).all():
                at_steps, x = gs[:b[1]], gv.reshape(e, -1)  # every expert on the same steps
            else:
                at_steps = np.sort(gs, kind="stable")  # merges the experts' sorted runs
                at_steps = at_steps[np.concatenate(([True], at_steps[1:] != at_steps[:-1]))]
                x = np.full((e, len(at_steps)), np.nan)
                for k in range(e):
                    x[k, np.searchsorted(at_steps, gs[b[k]:b[k + 1]])] = gv[b[k]:b[k + 1]]
            present = ~np.isnan(x)
            full = bool(present.all())  # the usual case, in fewer numpy calls
            n: int | np.ndarray = e if full else present.sum(axis=0)  # experts present
            total = (x if full else np.where(present, x, 0.0)).sum(axis=0)  # expert by expert, as Python's sum
            low = (x if full else np.where(present, x, np.inf)).min(axis=0)
            ok = (n >= 2) & (total > 0) & (low >= 0)
            if not ok.all():
                at_steps, x, present, total = at_steps[ok], x[:, ok], present[:, ok], total[ok]
                n = n if isinstance(n, int) else n[ok]
            if not len(at_steps):
                continue
            shares = x / total  # NaN where absent: sorted last, left out below
            rank = np.arange(1, e + 1)[:, None]
            # The Gini of the present shares sorted, sum((2i - E - 1) s) / E, scaled by E/(E-1) so
            # that 1 = every token on one expert.
            terms = (2.0 * rank - n - 1) * np.sort(shares, axis=0)
            if not full:
                terms = np.where(rank <= n, terms, 0.0)
            out[group] = _Rows(at_steps, terms.sum(axis=0) / n * n / (n - 1), shares, present)
        return out

    def _first_high(self, rows: dict[str, _Rows]) -> tuple[int, str, int, float] | None:
        """The first (step, group, row, median) whose window of load Ginis (the carried one,
        then these) has ``min_points`` values and a median at or above ``gini``."""
        import numpy as np

        from traindoc.detectors import _vector as vec

        cfg, w = self.config, self.config.window
        best: tuple[int, str, int, float] | None = None
        for group, r in rows.items():
            before = list(self._loads.get(group, ()))
            if max(before, default=-math.inf) < cfg.gini and r.gini.max() < cfg.gini:
                continue  # no median can reach it (a healthy run's usual case)
            c = len(before)
            seq = np.concatenate((np.asarray(before, dtype=np.float64), r.gini))
            hit: tuple[int, float] | None = None
            for j in range(max(c, cfg.min_points - 1), min(len(seq), w - 1)):  # a window not yet full
                m = median(seq[:j + 1].tolist())
                if m >= cfg.gini:
                    hit = (j - c, m)
                    break
            if hit is None:
                windows = vec.RollingMedian(seq, w)
                ks = np.arange(max(c - w + 1, 0), len(windows))
                ks = ks[windows.hi[ks] >= cfg.gini]  # a median is at most its window's maximum
                k = windows.first(ks, lambda m: m >= cfg.gini)
                if k is not None:
                    hit = (k + w - 1 - c, float(windows.at([k])[0]))
            if hit is not None:
                step = int(r.steps[hit[0]])
                if best is None or step < best[0]:
                    best = (step, group, hit[0], hit[1])
        return best

    def _fire_loads(self, rows: dict[str, _Rows], step: int, group: str, i: int, m: float) -> list[Finding]:
        if self._fired is not None:
            return []
        self._group = group
        self._shares[group] = rows[group].shares_at(i)
        return self._fire(step, m, "loads")

    def _latest_shares(self, rows: dict[str, _Rows], before: int | None) -> None:
        """``_shares``: each group's shares at its last judged step (before step ``before``)."""
        import numpy as np

        for group, r in rows.items():
            i = len(r.steps) - 1 if before is None else int(np.searchsorted(r.steps, before)) - 1
            if i >= 0:
                self._shares[group] = r.shares_at(i)

    def _track_loads(self, steps: np.ndarray, gini: np.ndarray) -> None:
        """``_track`` of each of these load Ginis in turn, at once."""
        if not len(steps):
            return
        import numpy as np

        self._last = (int(steps[-1]), float(gini[-1]))
        j = int(np.argmax(gini))  # the first of the largest
        if gini[j] > self._peak[1]:
            self._peak = (int(steps[j]), float(gini[j]))
        self._high += int((gini >= self.config.gini).sum())

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
        shares = self._shares.get(self._group) or (self._shares[min(self._shares)] if self._shares else None)
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


@dataclass(frozen=True)
class _Rows:
    """A layer group's judged steps in one delivery: the scaled Gini of each, the shares
    (experts x steps) and which experts were present."""

    steps: np.ndarray
    gini: np.ndarray
    shares: np.ndarray
    present: np.ndarray

    def shares_at(self, i: int) -> list[float]:
        """The present experts' shares at step ``steps[i]``, in expert order."""
        return self.shares[self.present[:, i], i].tolist()


def _kept(s: np.ndarray, v: np.ndarray, ends: list[int], keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The points ``keep`` of the steps ``s`` and values ``v``, and where each expert's points
    end among them."""
    if keep.all():
        return s, v, ends
    kept = keep.cumsum()
    return s[keep], v[keep], [int(kept[k - 1]) if k else 0 for k in ends]


@lru_cache(maxsize=1024)
def _order(signal: str) -> tuple[str, int, str]:
    """Where an expert's load comes among the others: by layer group, then expert number."""
    group, _, tail = signal.rpartition(".")
    return group, int(tail) if tail.isdigit() else 0, signal
