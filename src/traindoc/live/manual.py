"""Training without an optimizer object: parameters updated by hand under ``no_grad``.

Classic tutorials and small language-model examples step by hand: ``p -= lr * p.grad`` (or
``p.data.add_(p.grad, alpha=-lr)``), then ``p.grad = None``. No ``torch.optim`` hook fires, so
without this module such a run is one endless round. As long as the script has created no
``torch.optim`` optimizer, the trainable parameters of the models seen training stand behind
one stand-in optimizer (``ManualUpdate``). On a sampled round, right after a backward,
traindoc keeps a few sampled elements of the parameters; when the next step's work begins
(its forward, or its backward) and no optimizer stepped in between, it compares them. If they
moved, the script updated them by hand: the global *post*-step hooks run for the stand-in and
the round ends as a step that took effect. From then on, each sampled round also runs the
global *pre*-step hooks right after its backward (every probe snapshots what it measures,
gradients included), so every gradient and update detector judges the run; each unsampled
round (no snapshot) ends at its next backward as a step of the same kind: gradient
accumulation by hand is not told apart there. A run whose script made a torch.optim optimizer
never uses the stand-in (an optimizer made before ``traindoc.watch()`` steps, and so ends its
rounds, before any comparison).
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

import torch
from torch.optim import optimizer as _optim

from traindoc.live import measure
from traindoc.live.objects import is_user_file

if TYPE_CHECKING:
    from traindoc.live.session import Session


class ManualUpdate:
    """Stands for the script's hand-written update: duck-typed like an optimizer for
    traindoc's probes (``param_groups``, ``state``); it is never stepped by anyone."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.param_groups: list[dict[str, Any]] = [{"params": params, "lr": math.nan}]
        self.state: dict[Any, Any] = {}
        self.had_grads = False  # gradients present at the snapshot (cleared by the update since)
        self.grad_norms: dict[int, torch.Tensor] = {}  # id(param) -> its gradient norm then


class ManualSteps:
    def __init__(self, session: "Session") -> None:
        self.s = session
        self.update: ManualUpdate | None = None
        self.off = False  # the script made a torch.optim optimizer: nothing to stand in for
        self.seen = False  # a manual update has been seen: every round is one
        # (param, its sampled elements, its gradient's) at the last snapshot
        self._before: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []

    def after_backward(self, loss: Any) -> None:
        """A backward returned: on a sampled round of a run without optimizers, snapshot."""
        s = self.s
        if self.off or not s.clock.sampled or s.clock.round_done:
            return
        params = [p for m in s.models() for p in m.parameters() if p.requires_grad] or _leaves(loss)
        if not params:
            return
        if self.update is None or len(self.update.param_groups[0]["params"]) != len(params):
            self.update = ManualUpdate(params)
            s.model.name_tensors(_script_names(params, sys._getframe(1)))
        update = self.update
        grads = [(i, p.grad) for i, p in enumerate(params) if p.grad is not None]
        update.had_grads = bool(grads)
        with torch.no_grad():
            self._before = [(p, measure.strided(p).clone(),
                             measure.strided(p.grad).clone() if p.grad is not None else None)
                            for p in params[:8]]
            # the update clears them: measured now, read by the post-step measurement
            norms = measure.grad_norms([g for _, g in grads])
            update.grad_norms = {id(params[i]): norms[k] for k, (i, _) in enumerate(grads)}
        if self.seen:  # the stand-in becomes an optimizer only once a hand-written update was seen
            _run_hooks(_optim._global_optimizer_pre_hooks, update)

    def step_ended(self) -> bool:
        """The next step's work begins: did the script update the parameters by hand since
        the last backward? Ends the round as a manual step if so."""
        s, update = self.s, self.update
        if update is None or self.off or s.clock.round_done or not s.clock.micro:
            return False
        if self._before:
            before, self._before = self._before, []
            with torch.no_grad():
                moved = any(not torch.equal(measure.strided(p), b) for p, b, _ in before)
                if not moved:
                    return False
                update.param_groups[0]["lr"] = _lr(before)
            self.seen = True
        elif not self.seen:
            return False
        _run_hooks(_optim._global_optimizer_post_hooks, update)
        if not s.clock.round_done:  # the probes' hooks are gone (the run is finishing)
            s.on_step_post(update)
        return True


def _lr(before: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]) -> float:
    """The learning rate of a plain SGD step that explains the change: the least-squares fit
    of w_before - w_after = lr * grad over the sampled elements (a momentum or Adam-style
    update by hand gives its effective step size instead)."""
    num = den = 0.0
    for p, b, g in before:
        if g is not None:
            gf = g.float()
            num += float(((b.float() - measure.strided(p).float()) * gf).sum())  # sync point:
            den += float((gf * gf).sum())  # sampled rounds of hand-written runs only
    return num / den if den > 0 else math.nan


def _leaves(loss: Any) -> list[torch.Tensor]:
    """The leaf tensors ``loss``'s backward accumulated gradients into (raw weight tensors
    trained without an nn.Module, as in "What is torch.nn really?"): a walk of its graph,
    whose node structure outlives the backward."""
    nodes = measure.graph([getattr(loss, "grad_fn", None)])
    return [v for n in nodes if isinstance(v := getattr(n, "variable", None), torch.Tensor)][::-1]


def _script_names(params: list[torch.Tensor], frame: Any) -> list[tuple[torch.Tensor, str]]:
    """What the script calls each tensor: a variable of the user's frames (``weights``), or an
    item of a list variable (``parameters[2]``)."""
    ids = {id(p): p for p in params}
    out: dict[int, str] = {}
    while frame is not None and len(out) < len(ids):
        if is_user_file(frame.f_code.co_filename):
            for key, value in list(frame.f_locals.items()):
                if isinstance(value, torch.Tensor) and id(value) in ids:
                    out.setdefault(id(value), key)
                elif isinstance(value, (list, tuple)) and len(value) <= 10_000:
                    for i, item in enumerate(value):
                        if isinstance(item, torch.Tensor) and id(item) in ids:
                            out.setdefault(id(item), f"{key}[{i}]")
        frame = frame.f_back
    return [(ids[i], name) for i, name in out.items()]


def _run_hooks(hooks: Any, update: ManualUpdate) -> None:
    for hook in list(hooks.values()):
        hook(update, (), {})
