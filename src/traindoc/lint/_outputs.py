"""Where a tensor of a file comes from: the call or the module whose output it is.

A loss's input is followed back through names, ``self`` attributes, the calls that pass their
first argument's values on (each rule says which: ``.to()``, ``.view()``, a ReLU) and a
module's call (``model(x)``, ``self.head(h)``, ``self(x)`` in a LightningModule) to what made
it: the module's constructor (``nn.Linear(...)``, ``nn.Sequential(...)``, ``Net()``), or any
other call itself (``F.softmax(...)``). A class of the file is looked into by what its
``forward`` returns. A rule judges what is found (its width, whether it is a softmax).
"""

from __future__ import annotations

import ast

from traindoc.lint._ast import Module, method, unpacked_at, value_of
from traindoc.lint._models import RETURNS_SELF, WRAPPERS, class_defs
from traindoc.lint._nodes import dotted


class Outputs:
    """The origins of a file's tensors, for one rule: ``passes`` are the names of the calls
    (functions or tensor methods) whose result carries their first argument's values on."""

    def __init__(self, mod: Module, passes: frozenset[str]) -> None:
        self.mod = mod
        self.passes = passes
        self.classes = class_defs(mod)

    def origin(self, node: ast.expr, at: ast.AST, depth: int) -> ast.Call | None:
        """The call that made ``node``: the constructor of the module applied, ``self(x)``'s
        class as its own ``forward`` return's origin, or the call itself when it applies no
        module the file shows. ``at`` is always a node the file's index knows (a call or a
        statement): names are looked up from there. None when the file does not show it."""
        mod = self.mod
        for _ in range(depth):
            if isinstance(node, (ast.Name, ast.Attribute)):
                value = value_of(mod, node, at)
                if value is None or value is node:
                    return None
                node = value
                at = value if isinstance(value, ast.Call) else at
                continue
            if not isinstance(node, ast.Call):
                return None
            last = (mod.callee(node) or dotted(node.func) or "").rpartition(".")[2]
            receiver = method(node, *self.passes)
            if last in self.passes and (receiver is not None or node.args):
                node, at = (receiver if receiver is not None else node.args[0]), node
                continue
            if isinstance(node.func, ast.Name) and node.func.id == "self":  # self(x) in a LightningModule
                own = mod.scope(node).cls
                return self.returned(own, depth - 1) if own else None
            module = self.module(node.func, node, depth)
            return module if module is not None else node
        return None

    def returned(self, name: str, depth: int) -> ast.Call | None:
        """The origin of what the ``forward`` of the file's class ``name`` returns, when it
        has one return."""
        mod = self.mod
        if name not in self.classes or depth <= 0:
            return None
        forward = next((s for s in mod.scopes if s.cls == name and s.name == "forward"), None)
        if forward is None or len(forward.returns) != 1 or forward.returns[0].value is None:
            return None
        ret = forward.returns[0]
        return self.origin(ret.value, ret, depth - 1) if ret.value is not None else None

    def of_class(self, built: ast.Call) -> str | None:
        """The name of the file's class ``built`` constructs (``Net()``, or ``models.Net()``
        with ``import models`` of a sibling module), if it does."""
        func = built.func
        if isinstance(func, ast.Name):
            return func.id if func.id in self.classes else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
            func.attr in self.mod.sibling_modules.get(func.value.id, ())
        ):
            return func.attr if func.attr in self.classes else None
        return None

    def module(self, func: ast.expr, at: ast.AST, depth: int) -> ast.Call | None:
        """The constructor call of the module ``func`` names: through names, ``self`` attributes
        (all the class sets; one that wraps the attribute itself leads back to it), ``.to()``,
        DDP and the file's factory functions (of a returned tuple, the element unpacked into the
        name, or else its only module)."""
        mod = self.mod
        name: str | None = None
        for _ in range(2 * depth):
            if isinstance(func, (ast.Name, ast.Attribute)):
                sets = self._self_attribute(func, at) if isinstance(func, ast.Attribute) and _is_self(func) else []
                if len(sets) > 1:  # set more than once: each must lead to the same module
                    built = [self.module(v, stmt, depth - 1) for v, stmt in sets]
                    first = built[0]
                    return first if first is not None and all(b is first for b in built) else None
                if sets:
                    value, at = sets[0]
                else:
                    followed = None if _is_self(func) else value_of(mod, func, at)
                    if followed is None or followed is func:
                        return None
                    value = followed
                name, func = dotted(func), value
                at = value if isinstance(value, ast.Call) else at
                continue
            if not isinstance(func, ast.Call):
                return None
            q = mod.callee(func) or dotted(func.func) or ""
            last = q.rpartition(".")[2]
            receiver = method(func, *RETURNS_SELF)
            if receiver is not None:
                func, at = receiver, func
                continue
            if last in WRAPPERS and func.args:
                func, at = func.args[0], func
                continue
            if q.startswith("torch.nn.") or self.of_class(func) is not None:
                return func
            fn = mod.callee_scope(func)
            if fn is None or len(fn.returns) != 1 or fn.returns[0].value is None:
                return None
            ret, at = fn.returns[0].value, fn.returns[0]
            if isinstance(ret, ast.Tuple):
                stmt = mod.parent.get(func)
                index = unpacked_at(stmt, func, name) if stmt is not None else None
                if index is not None and index < len(ret.elts):
                    ret = ret.elts[index]
                else:  # unpacked under another name: the one element that is a module
                    found = [m for e in ret.elts if (m := self.module(e, at, depth - 1)) is not None]
                    return found[0] if len(found) == 1 else None
            func, name = ret, None
        return None

    def _self_attribute(self, node: ast.Attribute, at: ast.AST) -> list[tuple[ast.expr, ast.AST]]:
        """What ``self.x`` is set to in its class, with the statements: the assignments that do
        not wrap ``self.x`` itself (``self.model = model.to(rank)`` then
        ``self.model = DDP(self.model)``)."""
        mod = self.mod
        cls = mod.scope(at).cls
        text = dotted(node)
        values = [(v, stmt) for s in mod.scopes if s.cls == cls and cls
                  for t, stmt, v in s.assigns if t == text and isinstance(v, ast.expr)]
        return [(v, stmt) for v, stmt in values if not any(dotted(n) == text for n in ast.walk(v))]


def loss_calls(mod: Module, built: ast.Call) -> list[ast.Call]:
    """The calls that compute a loss: ``F.cross_entropy(x, y)`` itself, or the calls of a loss
    object, ``nn.CrossEntropyLoss()(x, y)`` or through the name (or ``self`` attribute) it is
    assigned to."""
    if (mod.callee(built) or "").startswith("torch.nn.functional."):
        return [built]
    parent = mod.parent.get(built)
    if isinstance(parent, ast.Call) and parent.func is built:
        return [parent]
    target = None
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        target = dotted(parent.targets[0])
    elif isinstance(parent, ast.IfExp):  # ce if n_classes > 1 else bce: a choice, not this loss
        return []
    if target is None:
        return []
    return [c for c in mod.calls if dotted(c.func) == target and c.args
            and value_of(mod, c.func, c) is built]


def _is_self(node: ast.expr) -> bool:
    text = dotted(node) or ""
    return text.startswith("self.") and text.count(".") == 1
