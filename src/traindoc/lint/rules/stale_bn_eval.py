"""stale-bn-eval: an EMA / averaged copy is evaluated with BatchNorm buffers that never moved."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, dotted, kwarg, method
from traindoc.lint.rules._common import Hit, Invalid

IN_PLACE = ("mul_", "add_", "lerp_", "copy_", "sub_", "addcmul_")
CNNS = ("resnet", "resnext", "wide_resnet", "efficientnet", "mobilenet", "densenet", "regnet", "convnext",
        "create_model", "vgg")


class EmaWithoutBuffers:
    """A model with BatchNorm has an EMA or averaged copy whose parameters are updated but whose
    buffers (BatchNorm ``running_mean``/``running_var``) never are, and that copy is evaluated
    (seed 004: "EMA model had broken batch normalization statistics"). Two forms: an EMA made
    with ``copy.deepcopy(model)`` and updated over ``zip(ema.parameters(), model.parameters())``
    with no buffer copy anywhere in the file; and ``AveragedModel(model)`` without
    ``use_buffers=True`` and without ``update_bn(...)`` (since torch 2.0 its buffers follow the
    live model at each ``update_parameters()`` instead of staying as constructed: statistics of
    the live weights, not of the average; the catalog page says which version does what). The
    file must show BatchNorm (``nn.BatchNorm2d``, ``SyncBatchNorm``, a torchvision/timm CNN); a
    model without running statistics has nothing to go stale.
    """

    id: ClassVar[str] = "stale-bn-eval"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import copy
            import torch
            import torchvision

            model = torchvision.models.resnet50().cuda()
            ema_model = copy.deepcopy(model)

            @torch.no_grad()
            def update_ema(decay=0.999):
                for ema_p, p in zip(ema_model.parameters(), model.parameters()):
                    ema_p.mul_(decay).add_(p, alpha=1 - decay)

            @torch.no_grad()
            def validate(net, loader):
                net.eval()
                return sum((net(x).argmax(1) == y).sum().item() for x, y in loader)

            acc = validate(ema_model, val_loader)
            """,
            10,
        ),
        Invalid(
            """
            import torch.nn as nn
            from torch.optim.swa_utils import AveragedModel

            net = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(), nn.LazyLinear(10))
            swa_net = AveragedModel(net)
            for epoch in range(epochs):
                train_one_epoch(net, loader)
                swa_net.update_parameters(net)
            swa_net.eval()
            print(evaluate(swa_net, test_loader))
            """,
            5,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import copy
        import torch
        import torchvision

        model = torchvision.models.resnet50().cuda()
        ema_model = copy.deepcopy(model)

        @torch.no_grad()
        def update_ema(decay=0.999):
            for ema_p, p in zip(ema_model.parameters(), model.parameters()):
                ema_p.mul_(decay).add_(p, alpha=1 - decay)
            for ema_b, b in zip(ema_model.buffers(), model.buffers()):
                ema_b.copy_(b)

        acc = validate(ema_model, val_loader)
        """,
        """
        import torch.nn as nn
        from torch.optim.swa_utils import AveragedModel, update_bn

        net = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU())
        swa_net = AveragedModel(net)
        swa_net.update_parameters(net)
        update_bn(train_loader, swa_net)
        print(evaluate(swa_net, test_loader))
        """,
        """
        import copy
        import torch

        model = GPT(config)  # LayerNorm only: no running statistics
        ema = copy.deepcopy(model)
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.lerp_(p, 0.001)
        print(evaluate(ema, val_loader))
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        if not _has_batchnorm(mod):
            return
        synced = _buffers_synced(mod)
        for call in mod.named("AveragedModel"):
            parent = mod.parent.get(call)
            target = None  # `target = AveragedModel(...)`: the name it is assigned to
            if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
                target = dotted(parent.targets[0])
            use_buffers = kwarg(call, "use_buffers")
            if target is None or (isinstance(use_buffers, ast.Constant) and use_buffers.value):
                continue
            if use_buffers is not None and not isinstance(use_buffers, ast.Constant):
                continue  # decided at run time
            if "update_bn" in mod.by_name or target in synced or not _evaluated(mod, target):
                continue
            source = dotted(call.args[0]) if call.args else "the model"
            yield Hit(
                call,
                f"`{target} = {mod.text(call)}` averages `{source}`'s parameters only and "
                f"`update_bn` is never called: `{target}` is evaluated with BatchNorm running "
                "statistics that were not computed for the averaged weights",
                cause="With `use_buffers=False` (the default) AveragedModel averages parameters "
                "only. Its buffers are copied from the source model at every `update_parameters()` "
                "since torch 2.0 (the live weights' statistics, not the average's), and stay as "
                "copied at construction before 2.0; only `use_buffers=True` or `update_bn(loader, "
                "model)` gives statistics of the averaged weights.",
                fix=f"Call `torch.optim.swa_utils.update_bn(train_loader, {target})` before "
                f"evaluating it, or build it with `AveragedModel({source}, use_buffers=True)`.",
            )
        for loop in _ema_loops(mod):
            ema, source = loop[1], loop[2]
            if ema in synced or not _evaluated(mod, ema) or not _deep_copied(mod, ema):
                continue
            yield Hit(
                loop[0],
                f"`{ema}` is updated from `{source}`'s parameters only (line {loop[0].lineno}) and "
                f"then evaluated, but its buffers are never copied: its BatchNorm running "
                f"statistics stay those of the deep copy, so validating `{ema}` gives "
                "meaningless results",
                cause="An EMA over `.parameters()` skips buffers; BatchNorm's running_mean and "
                "running_var are buffers.",
                fix=f"Also copy (or average) the buffers: `for b_ema, b in zip({ema}.buffers(), "
                f"{source}.buffers()): b_ema.copy_(b)`; or validate `{source}` itself.",
            )


def _has_batchnorm(mod: Module) -> bool:
    """The file shows BatchNorm layers: by name, or a torchvision/timm CNN (they all have them)."""
    if "BatchNorm" in mod.source:
        return True
    if "torchvision" not in mod.source and "timm" not in mod.source:
        return False
    return any(
        mod.callee(c).startswith(("torchvision.models.", "timm.create_model", "timm.models."))
        for name, calls in mod.by_name.items()
        if name.startswith(CNNS)
        for c in calls
    )


def _buffers_synced(mod: Module) -> set[str]:
    """Names whose buffers are copied somewhere: ``x.buffers()``, ``x.named_buffers()``,
    ``x.load_state_dict(...)``, or ``x`` handed to ``update_bn``."""
    out: set[str] = set()
    for call in mod.named("buffers", "named_buffers", "load_state_dict"):
        receiver = dotted(method(call, "buffers", "named_buffers", "load_state_dict"))
        if receiver:
            out.add(receiver)
            out.add(receiver.removesuffix(".module"))
    return out


def _ema_loops(mod: Module) -> Iterator[tuple[ast.stmt, str, str]]:
    """(loop, ema, source) for loops over ``zip(ema.parameters(), source.parameters())`` whose
    body (or a helper it calls) updates the first in place. The pairs may be wrapped
    (``enumerate(zip(...))``), kept in a name first (``pairs = list(zip(...))``) or drawn with
    ``next()`` in a ``while`` loop."""
    for call in mod.named("zip"):
        if len(call.args) != 2:
            continue
        ema, source = (dotted(method(a, "parameters")) for a in call.args)
        if ema is None or source is None or ema == source:
            continue
        for loop in _consumers(mod, call):
            if _updates_in_place(mod, loop):
                yield loop, ema, source
                break


def _consumers(mod: Module, call: ast.Call) -> list[ast.stmt]:
    """The loops that iterate over what ``call`` gives."""
    node: ast.AST = call
    up = mod.parent.get(node)
    while isinstance(up, ast.Call):  # enumerate(zip(...)), list(zip(...)), iter(zip(...))
        node, up = up, mod.parent.get(up)
    if isinstance(up, (ast.For, ast.AsyncFor)) and up.iter is node:
        return [up]
    if not (isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(up.targets[0], ast.Name)):
        return []
    name = up.targets[0].id
    scope = mod.scope(up)
    out: list[ast.stmt] = []
    for loop in scope.loops:
        if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.iter, ast.Name) and loop.iter.id == name:
            out.append(loop)
        elif isinstance(loop, ast.While) and any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "next"
            and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == name
            for stmt in loop.body for n in ast.walk(stmt)
        ):
            out.append(loop)
    return out


def _updates_in_place(mod: Module, loop: ast.stmt) -> bool:
    body = getattr(loop, "body", [])
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in IN_PLACE
           for stmt in body for n in ast.walk(stmt)):
        return True
    scope = mod.scope(loop)
    return any(
        isinstance(c.func, ast.Attribute) and c.func.attr in IN_PLACE
        for _, helper in mod.helpers(scope, loop) for c in helper.calls
    )


def _deep_copied(mod: Module, name: str) -> bool:
    return any(mod.callee(c).split(".")[-1] == "deepcopy" for c in mod.built.get(name, ()))


def _evaluated(mod: Module, name: str) -> bool:
    """``name(...)`` is called under no_grad, or ``name`` is handed to an evaluation function."""
    for call in mod.named(name.split(".")[-1]):
        if dotted(call.func) == name and mod.grad_mode(call):
            return True
    for calls in mod.by_name.values():
        for call in calls:
            callee = dotted(call.func) or ""
            last = callee.split(".")[-1].lower()
            if any(w in last for w in ("eval", "valid", "test")) and any(
                dotted(a) == name for a in [*call.args, *(k.value for k in call.keywords)]
            ):
                return True
    return False
