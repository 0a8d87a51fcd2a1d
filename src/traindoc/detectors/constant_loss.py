"""constant-loss: the loss handed to backward does not depend on the parameters."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar, Iterator

from traindoc.detectors._common import Example, finding, fmt
from traindoc.events import Backward, Event, ParamStats
from traindoc.findings import Finding


class ConstantLoss:
    """Steps whose loss gives zero gradient: backward() got a tensor with no autograd history (a
    constant that replaced the loss), or, on a sampled step, every gradient came out exactly
    zero (a clamp or ``torch.where`` that cut the graph)."""

    id: ClassVar[str] = "constant-loss"
    needs: ClassVar[frozenset[str]] = frozenset({"backward"})
    uses: ClassVar[frozenset[str]] = frozenset({"params"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("zoo/nan_masked_loss.py", 0),
        Example("zoo/clamped_loss.py", 0),
        Example("golden/constant_loss.jsonl", 5),
        Example("golden/healthy_noisy_loss.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        pass

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._backward: dict[int, tuple[float, str, bool]] = {}
        self._constant: list[int] = []
        self._zero_grad: list[int] = []
        self._grad_sq: dict[int, float] = {}
        self._with_grad: Counter[int] = Counter()
        self._steps = 0
        self._sampled = 0

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Backward):
            if event.step not in self._backward:
                self._steps += 1
            self._backward[event.step] = (event.value, event.where, event.constant)
            if event.constant and (not self._constant or self._constant[-1] != event.step):
                self._constant.append(event.step)
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
            if self._grad_sq.pop(s, 0.0) == 0.0 and s not in self._constant:
                self._zero_grad.append(s)
                yield self._finding()

    def _finding(self) -> Finding:
        steps = sorted(set(self._constant) | set(self._zero_grad))
        first = steps[0]
        values = Counter(round(self._backward[s][0], 6) for s in steps if s in self._backward)
        common = values.most_common(1)[0] if values else None
        where = sorted({self._backward[s][1] for s in steps if s in self._backward and self._backward[s][1]})
        parts = []
        if self._constant:
            parts.append(f"on {len(self._constant)} of {self._steps} steps backward() got a tensor with no autograd history")
        if self._zero_grad:
            parts.append(f"on {len(self._zero_grad)} of {self._sampled} sampled steps every gradient was exactly 0")
        value = f"; the value handed to backward was {fmt(common[0])} on {common[1]} of them" if common else ""
        return finding(
            self.id, step=first,
            message="; ".join(parts) + value + f" (first at step {first}).",
            evidence={"constant_steps": len(self._constant), "zero_gradient_steps": len(self._zero_grad),
                      "steps_observed": self._steps, "first_steps": steps[:20],
                      "value_to_backward": common[0] if common else None},
            where=where,
        )
