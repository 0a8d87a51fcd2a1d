"""frozen-param-updated: a parameter with requires_grad=False changed during training."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

from traindoc.detectors._common import Example, finding, fmt, names
from traindoc.events import Event, Optimizer, ParamStats
from traindoc.findings import Finding


class FrozenParamUpdated:
    """An optimizer step changed a parameter whose requires_grad is False: the freeze does not
    hold (momentum or weight decay keep moving it through a stale zero gradient)."""

    id: ClassVar[str] = "frozen-param-updated"
    needs: ClassVar[frozenset[str]] = frozenset({"params"})
    uses: ClassVar[frozenset[str]] = frozenset({"optimizer"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("zoo/frozen_param_updated.py", 10),
        Example("zoo/healthy_finetune.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        pass

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._opt: dict[int, Optimizer] = {}
        self._moved: dict[str, tuple[int, float, int]] = {}

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Optimizer):
            self._opt[event.index] = event
            return
        assert isinstance(event, ParamStats)
        if event.requires_grad or event.optimizer < 0 or not event.update:
            return
        if event.name not in self._moved:
            self._moved[event.name] = (event.step, event.update, event.optimizer)
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        return iter(())

    def _finding(self) -> Finding:
        items = sorted(self._moved.items(), key=lambda kv: kv[1][0])
        first_name, (step, upd, oi) = items[0]
        opt = self._opt.get(oi)
        hyper = ""
        if opt is not None:
            g = opt.groups[0]
            hyper = f" {opt.cls} has momentum {fmt(g.momentum)} and weight_decay {fmt(g.weight_decay)}."
        return finding(
            self.id, step=step,
            message=(
                f"{len(items)} parameter(s) with requires_grad=False changed in an optimizer step, "
                f"first at step {step} ({first_name}: relative change {fmt(upd)}): {names([n for n, _ in items])}."
                + hyper
            ),
            evidence={"parameters": [n for n, _ in items][:50], "first_step": step,
                      "relative_change": upd},
            where=[n for n, _ in items][:10],
        )
