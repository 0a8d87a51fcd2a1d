"""Trainable modules run under ``torch.inference_mode()`` while a training step is built.

The evaluation probe patches ``inference_mode.__enter__``/``__exit__`` (eval.py) and hands each
region entered on a sampled step to ``InferenceRegions``: it puts up a global forward pre hook
for the region's lifetime and notes every module with parameters an optimizer trains that
runs in it. At the region's end one ``InferenceForward`` event names those parameters and the
region's call site. Nothing runs on unsampled steps, and nothing is computed on tensors: the
hook reads module attributes only. Whether those parameters then went without a gradient is
the detector's judgement (a DQN's target computed by the online network under inference_mode
is fine: the same network also runs with gradients).
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
from torch.nn.modules.module import register_module_forward_pre_hook

from traindoc.events import Event, InferenceForward
from traindoc.live.objects import user_site
from traindoc.live.probes._patch import is_traced
from traindoc.live.session import Session

_MAX_MODULES = 64  # modules noted per region (a whole model run under it: its first ones)


class InferenceRegions:
    def __init__(self, session: Session) -> None:
        self.s = session
        self._hook: Any = None
        self._depth = 0
        self._site = ""
        self._ran: dict[Any, None] = {}  # modules with trainable parameters run in the region

    def enter(self, ctx: Any) -> None:
        """An ``inference_mode`` region opened on a sampled step (``inference_mode(False)`` is none)."""
        if is_traced() or self.s.compiled or not torch.is_inference_mode_enabled():
            return
        ctx.__dict__["_traindoc_inference"] = True
        self._depth += 1
        if self._depth == 1:
            self._site = user_site(2)  # a walk up the stack: sampled steps only
            self._hook = register_module_forward_pre_hook(self._pre)

    def exit(self, ctx: Any) -> None:
        if not ctx.__dict__.pop("_traindoc_inference", False):
            return
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:
            self.close()
            ran, self._ran = self._ran, {}
            self._report(list(ran))

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _pre(self, module: Any, args: Any) -> None:
        if module in self._ran or len(self._ran) >= _MAX_MODULES:
            self.close()  # a module runs again (the next batch): the region's modules are known
            return
        if any(p is not None and p.requires_grad for p in module._parameters.values()):
            self._ran[module] = None

    def _report(self, modules: list[Any]) -> None:
        if not modules:
            return
        held = self.s.held_ids()
        found = [(m, [p for p in m._parameters.values() if p is not None and p.requires_grad and id(p) in held])
                 for m in modules]
        found = [(m, mine) for m, mine in found if mine]
        if not found:
            return
        step, site, model = self.s.clock.current_step, self._site, self.s.model

        def decode(_: list[float]) -> Iterable[Event]:
            # At the flush, after the step: the parameters have the names ParamStats gives them
            # (a model is named at its first step).
            names: list[str] = []
            shown: list[str] = []
            for m, mine in found:
                own = [model.param_name(p) for p in mine]
                names.extend(own)
                if len(shown) < 16:
                    shown.append(f"{own[0].rsplit('.', 1)[0] if '.' in own[0] else own[0]} ({type(m).__name__})")
            yield InferenceForward(step=step, params=tuple(names[:64]), modules=tuple(shown), where=site)

        self.s.defer(torch.empty(0), decode)  # nothing to read: an event for the flush
