"""Which ``DataLoader`` a training loop iterates, and what its sampler is.

A loop's iterable is followed back to the ``DataLoader(...)`` call that built it: through
wrappers (``enumerate``, ``tqdm``, ``iter``), names (every assignment that may reach the loop, each
branch of an ``if``), ``self`` attributes, conditional expressions, dicts and lists of loaders,
and the returns of the file's functions (a tuple's element by its position in the unpacking).
"""

from __future__ import annotations

import ast
from typing import Iterator

from traindoc.lint._flow import Module
from traindoc.lint._nodes import dotted, kwarg
from traindoc.lint._scope import Scope
from traindoc.lint._values import value_of

# What a training loop's iterable is wrapped in on its way from the loader (progress bars,
# counters, mae's MetricLogger.log_every): the loader is their first argument.
WRAPPERS = frozenset({"enumerate", "iter", "zip", "list", "tuple", "tqdm", "islice", "log_every", "track"})


def loaders(mod: Module, node: ast.expr, at: ast.AST, depth: int = 6,
            index: int | None = None) -> Iterator[ast.Call]:
    """The ``DataLoader(...)`` calls ``node`` may hold, followed through wrappers, names,
    ``self`` attributes, conditional expressions, dicts of loaders and the returns of this
    file's functions (``index``: the position unpacked from a returned tuple)."""
    if depth == 0:
        return
    if isinstance(node, ast.Call):
        last = (mod.callee(node) or dotted(node.func) or "").split(".")[-1]
        if last.endswith("DataLoader"):
            yield node
            return
        if last in WRAPPERS and node.args:
            for a in node.args if last == "zip" else node.args[:1]:
                yield from loaders(mod, a, at, depth - 1)
            return
        fn = mod.callee_scope(node)
        if fn is not None:
            for ret in fn.returns:
                if ret.value is not None:
                    yield from loaders(mod, _element(ret.value, index), ret, depth - 1)
        return
    if isinstance(node, ast.IfExp):
        yield from loaders(mod, node.body, at, depth - 1)
        yield from loaders(mod, node.orelse, at, depth - 1)
    elif isinstance(node, (ast.DictComp, ast.Dict, ast.ListComp, ast.List, ast.Tuple)):
        yield from (c for part in _parts(node) for c in loaders(mod, part, at, depth - 1))
    elif isinstance(node, ast.Subscript):
        yield from loaders(mod, node.value, at, depth - 1)
    elif isinstance(node, (ast.Name, ast.Attribute)):
        for value, stmt in _assigned(mod, node, at):
            yield from loaders(mod, value, stmt, depth - 1, unpacked_at(stmt, value, dotted(node)))


def unwrapped(mod: Module, node: ast.expr) -> ast.expr:
    """``train_loader`` of ``enumerate(tqdm(train_loader))``."""
    while isinstance(node, ast.Call) and node.args and (mod.callee(node) or "").split(".")[-1] in WRAPPERS:
        node = node.args[0]
    return node


def _parts(node: ast.DictComp | ast.Dict | ast.ListComp | ast.List | ast.Tuple) -> list[ast.expr]:
    """The values a container literal or comprehension holds."""
    if isinstance(node, ast.DictComp):
        return [node.value]
    if isinstance(node, ast.ListComp):
        return [node.elt]
    return [v for v in (node.values if isinstance(node, ast.Dict) else node.elts) if v is not None]


def _assigned(mod: Module, node: ast.Name | ast.Attribute, at: ast.AST) -> list[tuple[ast.expr, ast.AST]]:
    """Every value a name may hold at ``at``: all its assignments before it in its function (each
    branch of an ``if``), else at module level, else what ``value_of`` finds (a parameter's
    argument, ``self.x`` set once, a config field)."""
    text = dotted(node)
    scope = mod.scope(at)
    line = getattr(at, "lineno", 0)
    found: list[tuple[ast.expr, ast.AST]] = []
    if text and not text.startswith("self."):
        found = _reaching(mod, scope, text, line)
        if not found and scope is not mod.scopes[0]:
            found = _reaching(mod, mod.scopes[0], text, 10**9)
    if not found:
        value = value_of(mod, node, at)
        if value is not node and value is not None:
            found = [(value, value)]
    return [(v, s) for v, s in found if v is not node]


def _reaching(mod: Module, scope: Scope, name: str, line: int) -> list[tuple[ast.expr, ast.AST]]:
    """The assignments of ``name`` that may reach ``line``: the last one made whatever the
    branches, and those in branches (``if``/``try``) after it."""
    out: list[tuple[ast.expr, ast.AST]] = []
    for stmt, value in reversed(scope.values_of(name, line)):
        if isinstance(value, ast.expr):
            out.append((value, stmt))
        if not any(isinstance(a, (ast.If, ast.Try)) and not a.lineno <= line <= (a.end_lineno or a.lineno)
                   for a in mod.ancestors(stmt)):
            break
    return out


def unpacked_at(stmt: ast.AST, value: ast.expr, name: str | None) -> int | None:
    """Where ``name`` stands in ``a, b, c = f(...)``: the element of f's returned tuple it gets."""
    if isinstance(stmt, ast.Assign) and stmt.value is value and isinstance(stmt.targets[0], (ast.Tuple, ast.List)):
        names = [dotted(t) for t in stmt.targets[0].elts]
        return names.index(name) if name in names else None
    return None


def _element(value: ast.expr, index: int | None) -> ast.expr:
    if index is not None and isinstance(value, (ast.Tuple, ast.List)) and index < len(value.elts):
        return value.elts[index]
    return value


def sampler_of(mod: Module, loader: ast.Call, kind: str) -> ast.Call | None:
    """The ``kind`` sampler (by the last part of its class) the loader draws its order from:
    its ``sampler=``, or the sampler inside its ``batch_sampler=``."""
    for key in ("sampler", "batch_sampler"):
        given = kwarg(loader, key)
        if given is None:
            continue
        for value in _sampler_calls(mod, given, loader, 4):
            last = (mod.callee(value) or "").split(".")[-1]
            if last.endswith(kind):
                return value
            if last.endswith("BatchSampler") and value.args:
                for inner in _sampler_calls(mod, value.args[0], value, 3):
                    if (mod.callee(inner) or "").split(".")[-1].endswith(kind):
                        return inner
    return None


def _sampler_calls(mod: Module, node: ast.expr, at: ast.AST, depth: int) -> Iterator[ast.Call]:
    if depth == 0:
        return
    if isinstance(node, ast.Call):
        yield node
    elif isinstance(node, ast.IfExp):
        yield from _sampler_calls(mod, node.body, at, depth - 1)
        yield from _sampler_calls(mod, node.orelse, at, depth - 1)
    elif isinstance(node, (ast.DictComp, ast.Dict)):
        yield from (c for part in _parts(node) for c in _sampler_calls(mod, part, at, depth - 1))
    elif isinstance(node, ast.Subscript):
        yield from _sampler_calls(mod, node.value, at, depth - 1)
    elif isinstance(node, (ast.Name, ast.Attribute)):
        for value, stmt in _assigned(mod, node, at):
            yield from _sampler_calls(mod, value, stmt, depth - 1)


def truth(mod: Module, node: ast.expr | None, at: ast.AST) -> bool | None:
    """True or False when ``node`` is (or names, through the file) a boolean constant."""
    if node is None:
        return None
    value = value_of(mod, node, at)
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return value.value
    return None
