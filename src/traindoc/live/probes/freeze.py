"""Freezing that lives in ``train()`` and never runs (MMPretrain-702).

Backbones in the mmcv style freeze their first stages inside an overridden ``train(mode)``
(``super().train(mode); self._freeze_stages()``). A loop that never calls ``model.train()``
(modules start in training mode, so nothing seems to need it) never freezes them: the "frozen"
stem trains. ``nn.Module.train`` is patched to note which modules it ran on (it is called a
few times per run). At the first optimizer step, each module of the trained models whose class
overrides ``train`` with code that sets ``requires_grad`` to False (read from the override's
source and the methods of the class it calls) and that never had ``train()`` called is
reported, with the parameters the override would freeze: found by running it on a deep copy
of the module (modules up to 256 MB; the user's module is not touched).
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import textwrap
from typing import Any

import torch.nn as nn

from traindoc.events import FreezeSkipped
from traindoc.live.objects import ObjectMap, file_line
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session

_MAX_COPY_BYTES = 256 << 20


class FreezeProbe(Probe):
    name = "freeze"
    signals = ("freeze",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._called = ObjectMap()  # modules train() ran on

    def install(self) -> None:
        self._patch(nn.Module, "train", self._wrap_train)

    def _wrap_train(self, orig: Any) -> Any:
        called = self._called

        @functools.wraps(orig)
        def train(module: Any, mode: bool = True) -> Any:
            # Only a class's own train() can skip a freeze (``_check``): torch's recursion over
            # the children of every other module is not recorded.
            if mode and type(module).train is not nn.Module.train and module not in called:
                called[module] = True
            return orig(module, mode)

        return train

    def on_first_step(self, opt: Any) -> None:
        self._guard(self.name, self._check)

    def _check(self) -> None:
        for root in self.s.models():
            for name, module in root.named_modules():
                override = _freezing_train(type(module))
                if override is None or module in self._called:
                    continue
                would = _would_freeze(module)
                if would is not None and not would:
                    continue  # ran on a copy and froze nothing (a condition not met): quiet
                prefix = f"{name}." if name else ""
                self.s.emit(FreezeSkipped(step=self.s.clock.current_step, module=name or type(module).__name__,
                                          cls=type(module).__name__, where=override,
                                          params=tuple(prefix + n for n in (would or ()))))


_FREEZING: dict[type, str | None] = {}


def _freezing_train(cls: type) -> str | None:
    """``file:line`` of ``cls``'s ``train`` override when it (or a method of the class it
    calls on ``self``) sets ``requires_grad`` to False; else None. Cached per class."""
    if cls in _FREEZING:
        return _FREEZING[cls]
    found: str | None = None
    fn = getattr(cls, "train", None)
    if fn is not None and fn is not nn.Module.train and getattr(fn, "__wrapped__", None) is not nn.Module.train:
        tree = _parse(fn)
        if tree is not None:
            called = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call)
                      and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                      and n.func.value.id == "self"}
            trees = [tree] + [t for m in called if (t := _parse(getattr(cls, m, None))) is not None]
            if any(_sets_frozen(t) for t in trees):
                code = fn.__code__
                found = file_line(code.co_filename, code.co_firstlineno)
    if len(_FREEZING) < 1024:
        _FREEZING[cls] = found
    return found


def _parse(fn: Any) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None


def _sets_frozen(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "requires_grad"
                                                for t in node.targets):
            if isinstance(node.value, ast.Constant) and node.value.value is False:
                return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "requires_grad_" and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value is False):
            return True
    return False


def _would_freeze(module: nn.Module) -> list[str] | None:
    """The parameters ``module.train()`` would freeze, run on a deep copy; None when the
    module is too large to copy or cannot be copied."""
    size = sum(p.numel() * p.element_size() for p in module.parameters())
    if size > _MAX_COPY_BYTES:
        return None
    try:
        twin = copy.deepcopy(module)
        before = {n for n, p in twin.named_parameters() if p.requires_grad}
        twin.train(True)
    except Exception:  # the user's own train() failed on a copy: say nothing about it
        return None
    return sorted(n for n, p in twin.named_parameters() if n in before and not p.requires_grad)
