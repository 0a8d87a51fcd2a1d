"""constant-loss: the loss handed to backward does not depend on the parameters."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar, Iterator, Mapping

from traindoc.detectors import _carry
from traindoc.detectors._common import Example, finding, fmt
from traindoc.events import Backward, Event, ParamStats
from traindoc.findings import Finding


# What carries over a resume (Engine.state_dict): the recent steps' losses, the counts of flagged
# steps, their values and call sites (all bounded), and the sampled steps still to judge.
_CARRIED = ("_recent", "_values", "_sites", "_constant", "_zero_grad", "_last_constant", "_first",
            "_grad_sq", "_with_grad", "_steps", "_sampled")


class ConstantLoss:
    """Steps whose loss gives zero gradient: backward() got a tensor with no autograd history (a
    constant that replaced the loss), or, on a sampled step, every gradient came out exactly
    zero (a clamp or ``torch.where`` that cut the graph)."""

    id: ClassVar[str] = "constant-loss"
    needs: ClassVar[frozenset[str]] = frozenset({"backward"})
    uses: ClassVar[frozenset[str]] = frozenset({"params"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("demo_scripts/nan_masked_loss.py", 0),
        Example("zoo/clamped_loss.py", 0),
        Example("golden/constant_loss.jsonl", 5),
        Example("golden/healthy_noisy_loss.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        pass

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        # Bounded however long the run: the backward() of the last _RECENT steps (the value and
        # call site of its last call, whether any call got a constant, whether the step was
        # flagged); a flagged step that leaves it adds its value to _values and its site to
        # _sites. Steps arrive in order, so a sampled step is judged while still in _recent.
        self._recent: dict[int, tuple[float, str, bool, bool]] = {}
        self._values: Counter[float] = Counter()  # rounded values of the flagged steps that left
        self._sites: set[str] = set()
        self._constant = 0  # steps on which backward() got a constant
        self._zero_grad = 0  # sampled steps on which every gradient was 0
        self._last_constant: int | None = None
        self._first: list[int] = []  # the first 20 flagged steps, in order
        self._grad_sq: dict[int, float] = {}
        self._with_grad: Counter[int] = Counter()
        self._steps = 0
        self._sampled = 0

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``_CARRIED``)."""
        return _carry.save(self, _CARRIED)

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        _carry.load(self, state, _CARRIED)

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Backward):
            old = self._recent.get(event.step)
            if old is None:
                self._steps += 1
                self._remember()
            constant = event.constant or (old is not None and old[2])
            self._recent[event.step] = (event.value, event.where, constant, old is not None and old[3])
            if event.constant and self._last_constant != event.step:
                self._last_constant = event.step
                self._constant += 1
                self._flag(event.step)
                yield self._finding()
            yield from self._close_before(event.step)
            return
        assert isinstance(event, ParamStats)
        if event.optimizer < 0 or not event.requires_grad or not event.has_grad or event.grad is None:
            return
        self._grad_sq[event.step] = self._grad_sq.get(event.step, 0.0) + event.grad ** 2
        self._with_grad[event.step] += 1

    def finish(self) -> Iterator[Finding]:
        yield from self._close_before(1 << 62)

    def _close_before(self, step: int) -> Iterator[Finding]:
        """Judge the sampled steps before ``step``: all their events have arrived."""
        for s in sorted(k for k in self._with_grad if k < step):
            del self._with_grad[s]  # judged once; keeps this loop short on long runs
            self._sampled += 1
            known = self._recent.get(s)
            if self._grad_sq.pop(s, 0.0) == 0.0 and not (known is not None and known[2]):
                self._zero_grad += 1
                self._flag(s)
                yield self._finding()

    def _flag(self, step: int) -> None:
        known = self._recent.get(step)
        if known is not None:
            self._recent[step] = (*known[:3], True)
        if step not in self._first:
            bisect.insort(self._first, step)
            del self._first[20:]

    def _remember(self) -> None:
        """Make room in _recent for a new step: the oldest leaves, its value counted if flagged."""
        if len(self._recent) < _RECENT:
            return
        step = next(iter(self._recent))
        value, where, _, flagged = self._recent.pop(step)
        if flagged:
            key = round(value, 6)
            if key in self._values or len(self._values) < _VALUES:
                self._values[key] += 1
            if where and len(self._sites) < _VALUES:
                self._sites.add(where)

    def _finding(self) -> Finding:
        first = self._first[0]
        values, sites = Counter(self._values), set(self._sites)
        for v, site, _, flagged in self._recent.values():  # in step order, as the counts
            if flagged:
                values[round(v, 6)] += 1
                if site:
                    sites.add(site)
        common = values.most_common(1)[0] if values else None
        parts = []
        if self._constant:
            parts.append(f"on {self._constant} of {self._steps} steps backward() got a tensor with no autograd history")
        if self._zero_grad:
            parts.append(f"on {self._zero_grad} of {self._sampled} sampled steps every gradient was exactly 0")
        value = f"; the value handed to backward was {fmt(common[0])} on {common[1]} of them" if common else ""
        return finding(
            self.id, step=first,
            message="; ".join(parts) + value + f" (first at step {first}).",
            evidence={"constant_steps": self._constant, "zero_gradient_steps": self._zero_grad,
                      "steps_observed": self._steps, "first_steps": list(self._first),
                      "value_to_backward": common[0] if common else None},
            where=sorted(sites),
        )


_RECENT = 64  # steps whose backward() is kept until they leave (a sampled step is judged sooner)
_VALUES = 1024  # distinct values counted (and call sites kept): a constant repeats one value
