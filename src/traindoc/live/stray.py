"""Gradients no optimizer steps, in the models whose forward ran in a training step.

Two failures look alike here and differ in the data flow. A parameter of a model that trains
which no optimizer holds (a learnable temperature left out, a model re-created after its
optimizer) is ``optimizer-param-mismatch``. A whole model that no optimizer holds and whose
output's graph reaches no parameter an optimizer holds (a DQN's target network, a distillation
teacher, called with autograd on) gets gradients that train nothing: ``target-not-detached``.
A model whose gradients the optimizer steps with, handed over by assignment (A3C's local copy
of a shared model, a bf16 working copy of fp32 master weights), is neither: ``handed_over``
finds it, and the accumulation probe follows its gradients as the optimizer's.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any, Iterable

import torch

from traindoc.events import Event, ParamStats, UnsteppedModel
from traindoc.live import measure
from traindoc.live.objects import ObjectMap, user_site, variable_name

if TYPE_CHECKING:
    from traindoc.live.session import Session

# Graph nodes looked at to tell whether a model's output depends on a trained parameter; past
# it the model counts as on the path (what it was before this judgement existed).
GRAPH_BUDGET = 4096


class StrayGrads:
    def __init__(self, session: "Session") -> None:
        self.s = session
        # model -> (the user's name for it, its call site) when off the trained parameters'
        # path; None when on it. Decided at its first training forward once an optimizer exists.
        self._side = ObjectMap()
        self._step = -1

    def on_root_forward(self, module: Any, output: torch.Tensor) -> None:
        if module in self._side:
            return
        held = self.s.held_ids()
        if not held:
            return
        off = not any(id(p) in held for p in module.parameters()) and not _reaches(output, held)
        self._side[module] = (variable_name(module, 3) or type(module).__name__, user_site(3)) if off else None

    def at_step(self, step: int, roots: list[Any], pnames: ObjectMap) -> None:
        """Once per step, whatever the number of optimizers: the parameters with gradients no
        optimizer holds, in the models that ran forward in this step."""
        if self._step == step:
            return
        self._step = step
        params = [p for opt in self.s.optimizers() for g in opt.param_groups for p in g["params"]]
        held = {id(p) for p in params}
        # A target network is told apart from a model re-created after its optimizer by the
        # optimizer's own parameters getting gradients.
        trained = any(p.grad is not None for p in params)
        # A model whose gradients the optimizers step with feeds them by assignment: neither
        # stray nor a target.
        fed = {id(p) for _, ps in handed_over(params, roots, held) for p in ps}
        stray: list[tuple[str, Any]] = []
        side: list[tuple[Any, tuple[str, str], list[Any]]] = []
        for root in roots:
            got = []
            for n, p in root.named_parameters():
                if p.requires_grad and p.grad is not None and id(p) not in held and p not in self.s.framework_held \
                        and id(p) not in fed:
                    held.add(id(p))  # shared by two roots: once
                    got.append((n, p))
            site = self._side.get(root) if trained else None
            if got and site is not None and any(p in self.s.framework_held for p in root.parameters()):
                # a framework's model (DeepSpeed's engine, adopted at its first step, after the
                # forward that judged it): on the path of the parameters the framework steps
                site = self._side[root] = None
            if got and site is not None:
                side.append((root, site, [p for _, p in got]))
            else:
                stray.extend((pnames.get(p) or n, p) for n, p in got)
        if not stray and not side:
            return
        grads = [p.grad for _, p in stray] + [p.grad for _, _, ps in side for p in ps]
        with torch.no_grad():
            norms = measure.grad_norms(grads)

        def decode(vals: list[float]) -> Iterable[Event]:
            for (n, p), g in zip(stray, vals):
                yield ParamStats(step=step, name=n, dtype=str(p.dtype), numel=measure.numel(p),
                                 requires_grad=p.requires_grad, norm=math.nan, grad=g,
                                 has_grad=True, optimizer=-1)
            rest = vals[len(stray):]
            for root, (name, where), ps in side:
                mine, rest = rest[:len(ps)], rest[len(ps):]
                yield UnsteppedModel(step=step, model=name, cls=type(root).__name__,
                                     numel=sum(p.numel() for p in ps), params=len(ps),
                                     grad=math.sqrt(sum(g * g for g in mine)), where=where)

        self.s.defer(norms, decode)


def handed_over(params: list[Any], roots: list[Any], held: set[int]) -> list[tuple[Any, list[Any]]]:
    """The models among ``roots`` (those that ran forward in the step) whose gradients the
    optimizer of ``params`` steps with, handed over by assignment, and their parameters that
    feed it. A parameter no optimizer holds (``held``: ids) feeds it when its ``.grad`` is one of
    the optimizer's gradient tensors (A3C's ``shared._grad = local.grad``). When no model of the
    step holds a parameter an optimizer holds, the models' gradients feed it as a copy
    (``master.grad = work.grad.float()``) when they have the shapes of the optimizer's. A target
    network is never one: the model it shadows ran in the step."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads or not roots:
        return []
    copies = True  # no model of the step holds a parameter an optimizer holds
    owns = []
    for root in roots:
        own = []
        for p in root.parameters():
            if id(p) in held:
                copies = False
            elif p.grad is not None:
                own.append(p)
        owns.append(own)
    fed = {_storage(g) for g in grads} - {0}
    found = [(root, feeding) for root, own in zip(roots, owns)
             if (feeding := [p for p in own if _storage(p.grad) in fed])]
    if found or not copies:
        return found
    # A copy: the models' gradients together have the optimizer's shapes (a model called through
    # its submodules, minimalRL's ``model.pi(x)``, is several roots).
    if Counter(tuple(p.grad.shape) for own in owns for p in own) == Counter(tuple(g.shape) for g in grads):
        return [(root, own) for root, own in zip(roots, owns) if own]
    return []


def _storage(grad: torch.Tensor) -> int:
    """Where a dense gradient's data starts (0: empty, or sparse, which has no one place)."""
    return grad.data_ptr() if grad.layout == torch.strided and grad.numel() else 0


def _reaches(output: torch.Tensor, held: set[int]) -> bool:
    """Does ``output``'s autograd graph reach a parameter in ``held`` (within GRAPH_BUDGET
    nodes; past it: yes)?"""
    for n, node in enumerate(measure.graph([output.grad_fn], GRAPH_BUDGET + 1)):
        variable = getattr(node, "variable", None)  # AccumulateGrad: a leaf tensor
        if n == GRAPH_BUDGET or (variable is not None and id(variable) in held):
            return True
    return False
