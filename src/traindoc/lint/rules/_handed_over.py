"""Gradients handed over from one model to the parameters an optimizer holds, followed in the
source (for ``missing-zero-grad``): ``for g, l in zip(shared.parameters(), local.parameters()):
g._grad = l.grad`` (A3C) or ``m.grad = w.grad.float()`` (a half-precision working copy), and
whether the loop clears the model they come from."""

from __future__ import annotations

import ast

from traindoc.lint._ast import Module, Scope, dotted, kwarg, method


def _parts(mod: Module, scope: Scope, loop: ast.stmt) -> list[tuple[Scope, ast.stmt | None]]:
    """What runs in ``loop``: its own scope within the loop, and whole functions it calls."""
    parts: list[tuple[Scope, ast.stmt | None]] = [(scope, loop)]
    return parts + [(h, None) for _, h in mod.helpers(scope, loop)]


def handed_over(mod: Module, scope: Scope, loop: ast.stmt) -> list[tuple[ast.stmt, str, str, bool]]:
    """Places in ``loop`` (or the functions it calls) that hand another model's gradient to a
    ``.grad``: ``for g, l in zip(a.parameters(), b.parameters()): g._grad = l.grad`` (or
    ``g.grad.copy_(l.grad)``). Each with the statement, the model (``b``), the loop variable
    (``l``) and whether the tensor itself is handed (no copy: ``l.grad``, not ``l.grad.float()``)."""
    out: list[tuple[ast.stmt, str, str, bool]] = []
    for part, node in _parts(mod, scope, loop):
        for stmt in ast.walk(node or part.node):
            if isinstance(stmt, ast.Assign) and any(  # any target: ``shared_params[name].grad`` too
                    isinstance(t, ast.Attribute) and t.attr in ("grad", "_grad") for t in stmt.targets):
                value = stmt.value
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and stmt.value.args \
                    and _is_grad(method(stmt.value, "copy_")):
                value = stmt.value.args[0]
            else:
                continue
            source: ast.AST = value
            while isinstance(source, (ast.Call, ast.Attribute)) and not (
                    isinstance(source, ast.Attribute) and source.attr == "grad"):
                source = source.func if isinstance(source, ast.Call) else source.value
            if not (isinstance(source, ast.Attribute) and isinstance(source.value, ast.Name)):
                continue
            var = source.value.id
            model = _model_of(mod, stmt, var, part)
            if model:
                out.append((stmt, model, var, source is value and isinstance(stmt, ast.Assign)))
    return out


def _is_grad(node: ast.AST | None) -> bool:
    """``x.grad`` or ``x.grad.data``."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "grad"


def _model_of(mod: Module, node: ast.AST, var: str, scope: Scope, depth: int = 2) -> str | None:
    """The model whose parameters ``var`` ranges over at ``node``: a loop around it binds it
    (``_zipped_model``), ``a, var = next(pairs)`` over such pairs does, or ``var`` is a parameter
    of a function whose callers' loops bind the argument they pass (``copy_grad(g, l)`` called in
    ``for g, l in zip(...)``)."""
    found = next((m for a in mod.ancestors(node) if (m := _zipped_model(mod, a, var))), None)
    if not found:
        made = scope.values_of(var, before=getattr(node, "lineno", None))
        last = made[-1][0] if made else None
        if isinstance(last, ast.Assign) and isinstance(last.value, ast.Call) \
                and dotted(last.value.func) == "next" and last.value.args:
            found = _bound(last.targets[0], _made(mod, last, last.value.args[0]), var)
    fn = scope.node
    if found or depth == 0 or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return found
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    if var not in params:
        return None
    index = params.index(var) - (1 if scope.cls and params[0] == "self" else 0)
    for call in mod.callers_of(scope):
        passed = kwarg(call, var) or (call.args[index] if 0 <= index < len(call.args) else None)
        if isinstance(passed, ast.Name) and (m := _model_of(mod, call, passed.id, mod.scope(call), depth - 1)):
            return m
    return None


def _zipped_model(mod: Module, node: ast.AST, var: str) -> str | None:
    """``b`` when ``node`` is a loop binding ``var`` to ``b``'s parameters: ``for p in
    b.parameters()``, ``for a, p in zip(a.parameters(), b.parameters())``, ``for n, p in
    b.named_parameters()``, in ``enumerate``, or over a list of them made before the loop."""
    return _bound(node.target, _made(mod, node, node.iter), var) if isinstance(node, ast.For) else None


def _made(mod: Module, node: ast.AST, values: ast.expr) -> ast.expr:
    """What ``values`` iterates: a name followed to its value before ``node``, and ``list``,
    ``tuple`` or ``iter`` taken off."""
    if isinstance(values, ast.Name):
        made = mod.scope(node).values_of(values.id, before=getattr(node, "lineno", None))
        values = made[-1][1] if made and isinstance(made[-1][1], ast.expr) else values
    if isinstance(values, ast.Call) and dotted(values.func) in ("list", "tuple", "iter") and len(values.args) == 1:
        values = values.args[0]
    return values


def _bound(target: ast.expr, values: ast.expr, var: str) -> str | None:
    if isinstance(target, ast.Name):
        return dotted(method(values, "parameters")) if target.id == var else None
    if not (isinstance(target, ast.Tuple) and isinstance(values, ast.Call)):
        return None
    pairs: list[tuple[ast.expr, ast.expr]] = []
    named = method(values, "named_parameters")
    if named is not None and len(target.elts) == 2:  # for name, p in b.named_parameters()
        return dotted(named) if isinstance(target.elts[1], ast.Name) and target.elts[1].id == var else None
    if dotted(values.func) == "enumerate" and len(values.args) == 1 and len(target.elts) == 2:
        pairs = [(target.elts[1], values.args[0])]
    elif dotted(values.func) == "zip" and len(values.args) == len(target.elts):
        pairs = list(zip(target.elts, values.args))
    return next((m for t, v in pairs if (m := _bound(t, v, var))), None)


def clears_model(mod: Module, scope: Scope, loop: ast.stmt, model: str, var: str, shared: bool) -> bool:
    """Something in the loop clears ``model``'s gradients: its ``zero_grad()`` (a helper may
    call it ``self.lnet`` or ``lnet``), ``var.grad = None`` or ``p.grad.zero_()`` over its
    parameters, the model built afresh, or, for a shared tensor, ``zero_grad(set_to_none=False)``
    on the optimizer."""
    last = model.rsplit(".", 1)[-1]
    for part, node in _parts(mod, scope, loop):
        def here(n: ast.AST) -> bool:
            return node is None or mod.inside(n, node)

        for call in part.calls:
            receiver = method(call, "zero_grad", "zero_")
            if receiver is None or not here(call):
                continue
            name = dotted(receiver) or ""
            keep = kwarg(call, "set_to_none")
            if name.rsplit(".", 1)[-1] == last or (shared and isinstance(keep, ast.Constant) and keep.value is False):
                return True
            if name.endswith(".grad") and _over_model(mod, call, name[:-5], model, var):
                return True
        for target, stmt, value in part.assigns:
            if not here(stmt):
                continue
            if target == model and isinstance(value, ast.Call):
                return True  # built afresh
            if target.endswith(".grad") and isinstance(value, ast.Constant) and value.value is None \
                    and _over_model(mod, stmt, target[:-5], model, var):
                return True
    return False


def _over_model(mod: Module, node: ast.AST, name: str, model: str, var: str) -> bool:
    """``name`` at ``node`` is one of ``model``'s parameters: the hand-over's own loop variable,
    or the variable of a loop over ``model.parameters()``."""
    return name == var or any(_zipped_model(mod, a, name) == model for a in mod.ancestors(node))
