"""One pass over a file's AST and the names it can follow.

``IndexedFile`` parses a file once and indexes it: import aliases (so ``nn.utils.clip_grad_norm_``
resolves to ``torch.nn.utils.clip_grad_norm_``), the parent of every node, and per function
("scope") its calls, assignments, ``with`` blocks, loops and returns. It answers questions about
names (what a call calls, which names are optimizers, schedulers, scalers) and structure (which
loops are around a node, whether it runs under ``torch.no_grad()``). The training flow on top of
it is ``_flow.Module``'s.
"""

from __future__ import annotations

import ast
import operator
from pathlib import Path
from typing import Any, Callable, Iterator

from traindoc.lint._nodes import LOOP_TYPES, LOW_PRECISION, OPTIMIZER_CLASSES, SCALER_CLASSES, dotted, number
from traindoc.lint._scope import AssignValue, Scope
from traindoc.lint._siblings import Origins, SiblingCache, import_targets, link

# A handler of Module._index: (module, parent, child, scope) -> whether the child opens a scope
# (scope_of[child] is then set). ``child`` is Any: it is of the node type the handler is filed
# under in Module._handlers, which a dict from types to handlers cannot express.
_Handler = Callable[["IndexedFile", ast.AST, Any, Scope], bool]


class IndexedFile:
    """One parsed source file and everything the rules ask about it."""

    def __init__(self, source: str, path: str = "<string>", *, folder: Path | None = None,
                 siblings: SiblingCache | None = None) -> None:
        self.path = path
        self.source = source
        self.tree = ast.parse(source, filename=path)
        # With ``folder``: what the file imports from sibling modules there is appended to the
        # tree (``_siblings``); ``origins`` says where those lines come from.
        self.origins: Origins | None = None
        # sibling modules imported whole (``import utils``) -> their functions appended here
        self.sibling_modules: dict[str, set[str]] = {}
        linked: dict[str, str] = {}
        if folder is not None:
            found = link(self.tree, source, folder, folder / Path(path).name, siblings)
            if found is not None:
                self.source, self.origins = found.source, found.origins
                linked, self.sibling_modules = found.names, found.modules
        self.aliases: dict[str, str] = {}
        self.parent: dict[ast.AST, ast.AST] = {}
        self.scopes: list[Scope] = []
        self.scope_of: dict[ast.AST, Scope] = {}
        self.functions: dict[str, list[Scope]] = {}
        self.calls: list[ast.Call] = []
        # dotted target text -> the calls assigned to it anywhere in the file
        self.built: dict[str, list[ast.Call]] = {}
        self._lines: list[str] | None = None
        self._callees: dict[int, str] = {}
        self._kinds: dict[int, str | None] = {}
        # calls by the last part of what they call: by_name["step"] holds every `x.step(...)`
        self.by_name: dict[str, list[ast.Call]] = {}
        # Answers computed once (by constructors and _values.torch_saves).
        self._constructors: list[ast.Call] | None = None
        self._torch_saves: list[tuple[ast.Call, ast.expr | None, ast.expr | None, ast.Call]] | None = None
        self._index()
        for local, real in linked.items():
            # an imported function now defined in this tree is called like one of this file
            self.aliases.pop(local, None)
            if local != real:
                self.functions.setdefault(local, []).extend(s for s in self.functions.get(real, ()) if s.cls is None)

    # -- indexing -----------------------------------------------------------------------------

    def _index(self) -> None:
        # One pass over the tree, written for speed (it is most of lint's time besides parsing):
        # per node type only the fields that can hold nodes are read; names, constants and
        # other leaves are skipped; parents and scopes are recorded for the nodes rules ask
        # about (statements, calls and what lies between them); per-type work is a dict lookup.
        top = Scope(self.tree, "<module>")
        self.scopes.append(top)
        self.scope_of[self.tree] = top
        parent = self.parent
        scope_of = self.scope_of
        handlers = self._handlers
        leaves = _LEAVES
        child_fields = _CHILD_FIELDS
        todo: list[tuple[ast.AST, Scope]] = [(self.tree, top)]
        pop, push = todo.pop, todo.append
        while todo:
            node, scope = pop()
            for name in child_fields[type(node)]:
                value = getattr(node, name, None)
                if value is None:
                    continue
                for child in value if type(value) is list else (value,):
                    kind = type(child)
                    if kind in leaves or child is None:
                        continue
                    parent[child] = node
                    handler = handlers.get(kind)
                    if handler is None:
                        push((child, scope))
                    elif handler(self, node, child, scope):
                        push((child, scope_of[child]))
                    else:
                        scope_of[child] = scope
                        push((child, scope))
        position = _POSITION
        for scope in self.scopes:
            scope.calls.sort(key=position)
            scope.assigns.sort(key=_ASSIGN_POSITION)
            for group in (scope.withs, scope.loops, scope.returns, scope.trys, scope.ifs):
                group.sort(key=position)
        self.calls.sort(key=position)
        # `from torch.optim import AdamW as AW`: file AW(...) under AdamW too
        for local, full in self.aliases.items():
            real = full.rpartition(".")[2]
            if real != local and local in self.by_name:
                named = [c for c in self.by_name[local] if isinstance(c.func, ast.Name)]
                self.by_name.setdefault(real, []).extend(named)
        for calls in self.by_name.values():
            calls.sort(key=position)

    def named(self, *names: str) -> list[ast.Call]:
        """Calls of ``x.<name>(...)`` or ``<name>(...)`` for any of ``names``, in source order."""
        if len(names) == 1:
            return self.by_name.get(names[0], [])
        out = [c for n in names for c in self.by_name.get(n, ())]
        out.sort(key=_POSITION)
        return out

    def named_in(self, scope: Scope, *names: str) -> list[ast.Call]:
        """``named`` restricted to calls in ``scope``."""
        return [c for c in self.named(*names) if self.scope_of.get(c) is scope]

    def constructors(self) -> list[ast.Call]:
        """Calls that may build an optimizer, scheduler, scaler or accelerator: a capitalized
        name (``AdamW(...)``) or a ``get_*schedule*`` factory."""
        if self._constructors is None:
            self._constructors = [
                c for name, calls in self.by_name.items()
                if name[:1].isupper() or (name.startswith("get_") and "schedule" in name)
                for c in calls
            ]
        return self._constructors

    # The handlers of _index: ``child`` is of the node type each is filed under in _handlers.

    def _on_function(self, node: ast.AST, child: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
                     scope: Scope) -> bool:
        cls = node.name if isinstance(node, ast.ClassDef) else None
        name = getattr(child, "name", "<lambda>")
        inner = Scope(child, name, cls)
        self.scopes.append(inner)
        self.functions.setdefault(name, []).append(inner)
        self.scope_of[child] = inner
        return True  # decorators and defaults land in the function's scope: close enough

    def _on_call(self, node: ast.AST, child: ast.Call, scope: Scope) -> bool:
        scope.calls.append(child)
        self.calls.append(child)
        func = child.func
        if type(func) is ast.Attribute:
            key = func.attr
        elif type(func) is ast.Name:
            key = func.id  # re-filed under its imported name after the pass (see _index)
        else:
            return False
        self.by_name.setdefault(key, []).append(child)
        return False

    def _on_assign(self, node: ast.AST, child: ast.Assign, scope: Scope) -> bool:
        for target in child.targets:
            self._assign(scope, target, child, child.value)
        return False

    def _on_augassign(self, node: ast.AST, child: ast.AnnAssign | ast.AugAssign, scope: Scope) -> bool:
        if child.value is not None:
            value = child if type(child) is ast.AugAssign else child.value
            text = dotted(child.target)
            if text:
                scope.assigns.append((text, child, value))
        return False

    def _on_import(self, node: ast.AST, child: ast.Import | ast.ImportFrom, scope: Scope) -> bool:
        self.aliases.update(import_targets([child]))
        return False

    def _statement(self, node: ast.AST, child: ast.AST, scope: Scope) -> bool:
        return False

    @staticmethod
    def _collect(group: str) -> _Handler:
        def on(self: IndexedFile, node: ast.AST, child: ast.AST, scope: Scope) -> bool:
            getattr(scope, group).append(child)
            return False

        return on

    _handlers: dict[type[ast.AST], _Handler] = {}

    def _assign(self, scope: Scope, target: ast.expr, stmt: ast.stmt, value: ast.expr) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            # a, b = x, y pairs up; a, b = f() gives each name the call (its origin)
            pairs = (
                zip(target.elts, value.elts)
                if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                else ((t, value) for t in target.elts)
            )
            for t, v in pairs:
                self._assign(scope, t, stmt, v)
            return
        text = dotted(target)
        if text is None:
            return
        scope.assigns.append((text, stmt, value))
        if isinstance(value, ast.Call):
            self.built.setdefault(text, []).append(value)

    # -- names --------------------------------------------------------------------------------

    def qualname(self, node: ast.AST | None) -> str | None:
        """``dotted`` with the first part resolved through the file's imports."""
        text = dotted(node)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        full = self.aliases.get(head, head)
        return f"{full}.{rest}" if rest else full

    def callee(self, call: ast.AST) -> str:
        """The qualified name of the function a call calls, or ''."""
        if not isinstance(call, ast.Call):
            return ""
        cache = self._callees
        key = id(call)
        found = cache.get(key)
        if found is None:
            found = cache[key] = self.qualname(call.func) or ""
        return found

    def role(self, text: str | None) -> str | None:
        """'optimizer', 'scheduler', 'scaler' or 'accelerator' for a dotted name, else None.

        Known by the call that built it anywhere in the file; failing that (a function
        argument), by the name it goes by.
        """
        if not text:
            return None
        for call in self.built.get(text, ()):
            kind = self.kind_of_call(call)
            if kind:
                return kind
        last = text.split(".")[-1].lower()
        if "sched" in last:
            return "scheduler"
        if "scaler" in last:
            return "scaler"
        if "optim" in last or last.startswith("opt_") or (last.startswith("opt") and len(last) <= 4):
            return "optimizer"
        if last.endswith("accelerator") or last == "fabric":
            return "accelerator"
        return None

    def kind_of_call(self, call: ast.Call) -> str | None:
        key = id(call)
        if key not in self._kinds:
            self._kinds[key] = self._kind_of_call(call)
        return self._kinds[key]

    def _kind_of_call(self, call: ast.Call) -> str | None:
        q = self.callee(call)
        last = q.split(".")[-1]
        if "lr_scheduler." in q or last in ("ReduceLROnPlateau", "CosineAnnealingWarmRestarts"):
            return "scheduler"
        if last.endswith(("LR", "LRScheduler")) or (
            last.startswith("get_") and "schedule" in last
        ):
            return "scheduler"
        if last in SCALER_CLASSES:
            return "scaler"
        if last in OPTIMIZER_CLASSES or (
            q.startswith("torch.optim.") and last[:1].isupper() and last != "Optimizer"
        ):
            return "optimizer"
        if last in ("Accelerator", "Fabric"):
            return "accelerator"
        return None

    def is_dtype(self, node: ast.AST | None, scope: Scope | None = None) -> str | None:
        """'torch.bfloat16' etc. when ``node`` is (or names, via one assignment) a low precision."""
        q = self.qualname(node)
        if q in LOW_PRECISION:
            return q
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and scope is not None:
            from traindoc.lint._values import value_of  # _values reads this index: no cycle at import

            q = self.qualname(value_of(self, node, node, scope=scope))
            if q in LOW_PRECISION:
                return q
        return None

    # -- structure ----------------------------------------------------------------------------

    def scope(self, node: ast.AST) -> Scope:
        return self.scope_of.get(node) or self.scopes[0]

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        """Enclosing nodes, innermost first, up to (not including) the enclosing function."""
        up = self.parent.get(node)
        while up is not None and not isinstance(up, _SCOPE_TYPES):
            yield up
            up = self.parent.get(up)

    def loops_around(self, node: ast.AST) -> list[ast.stmt]:
        return [a for a in self.ancestors(node) if isinstance(a, LOOP_TYPES)]

    def inside(self, node: ast.AST, outer: ast.AST) -> bool:
        return any(a is outer for a in self.ancestors(node))

    def grad_mode(self, node: ast.AST) -> str | None:
        """'no_grad' or 'inference' when ``node`` runs with autograd off, else None."""
        for a in self.ancestors(node):
            if isinstance(a, (ast.With, ast.AsyncWith)):
                for item in a.items:
                    mode = self.with_mode(item.context_expr)
                    if mode == "enable":
                        return None
                    if mode:
                        return mode
        fn = self.scope(node).node
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in fn.decorator_list:
                mode = self.with_mode(deco)
                if mode and mode != "enable":
                    return mode
        return None

    def mode_blocks(self, scope: Scope, *modes: str) -> list[tuple[ast.stmt, ast.expr]]:
        """The blocks of ``scope`` that run under one of the grad ``modes`` (``with_mode``):
        its ``with`` statements, and the function itself when a decorator sets one; each with
        the expression that sets the mode."""
        out: list[tuple[ast.stmt, ast.expr]] = [
            (w, i.context_expr) for w in scope.withs for i in w.items if self.with_mode(i.context_expr) in modes]
        fn = scope.node
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out += [(fn, d) for d in fn.decorator_list if self.with_mode(d) in modes]
        return out

    def with_mode(self, expr: ast.AST) -> str | None:
        target = expr.func if isinstance(expr, ast.Call) else expr
        q = self.qualname(target) or ""
        if q in ("torch.no_grad", "torch.autograd.no_grad"):
            return "no_grad"
        if q in ("torch.inference_mode", "torch.autograd.inference_mode"):
            if isinstance(expr, ast.Call) and expr.args and number(expr.args[0]) == 0:
                return None  # inference_mode(False)
            return "inference"
        if q in ("torch.enable_grad", "torch.autograd.enable_grad"):
            return "enable"
        if q == "torch.set_grad_enabled" and isinstance(expr, ast.Call) and expr.args:
            flag = expr.args[0]
            if isinstance(flag, ast.Constant) and flag.value is False:
                return "no_grad"
        return None

    def text(self, node: ast.AST | None, limit: int = 80) -> str:
        """The source text of ``node`` as the user wrote it (``1e6``, not ``1000000.0``),
        on one line and shortened, for a message."""
        if node is None:
            return ""
        if self._lines is None:
            self._lines = self.source.splitlines(keepends=True)
        try:
            # Any node with positions (expr, stmt, keyword, arg ...); one without fails here
            # (AttributeError, TypeError) and is unparsed below.
            located: Any = node
            start, end = located.lineno - 1, located.end_lineno - 1
            first, last = located.col_offset, located.end_col_offset
            if start == end:
                raw = self._lines[start].encode()[first:last].decode()
            else:
                parts = [self._lines[start].encode()[first:].decode()]
                parts += self._lines[start + 1 : end]
                parts.append(self._lines[end].encode()[:last].decode())
                raw = "".join(parts)
            text = " ".join(raw.split())
        except (AttributeError, IndexError, TypeError, UnicodeDecodeError):
            text = ast.unparse(node)
        return text if len(text) <= limit else text[: limit - 3] + "..."


_LEAVES = frozenset({ast.Name, ast.Constant, ast.Load, ast.Store, ast.Del, ast.alias, ast.arg})
# Fields that never hold nodes worth visiting (strings, ints, contexts, operators).
_SCALAR_FIELDS = frozenset(
    "ctx op ops id attr name module arg type_comment kind conversion is_async level simple "
    "kwd_attrs names tag".split()
)


class _ChildFields(dict[type, tuple[str, ...]]):
    """node type -> the names of its fields that can hold child nodes (computed on demand)."""

    def __missing__(self, kind: type) -> tuple[str, ...]:
        fields = tuple(f for f in getattr(kind, "_fields", ()) if f not in _SCALAR_FIELDS)
        self[kind] = fields
        return fields


_CHILD_FIELDS = _ChildFields()
# Statements and calls are what rules locate and ask the scope of: give every statement type a
# handler so that it is recorded in scope_of.
_STATEMENTS = [
    k for k in vars(ast).values() if isinstance(k, type) and issubclass(k, ast.stmt) and k is not ast.stmt
]
_SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)
IndexedFile._handlers = {
    ast.FunctionDef: IndexedFile._on_function,
    ast.AsyncFunctionDef: IndexedFile._on_function,
    ast.Lambda: IndexedFile._on_function,
    ast.Call: IndexedFile._on_call,
    ast.Assign: IndexedFile._on_assign,
    ast.AnnAssign: IndexedFile._on_augassign,
    ast.AugAssign: IndexedFile._on_augassign,
    ast.Import: IndexedFile._on_import,
    ast.ImportFrom: IndexedFile._on_import,
    ast.With: IndexedFile._collect("withs"),
    ast.AsyncWith: IndexedFile._collect("withs"),
    ast.For: IndexedFile._collect("loops"),
    ast.AsyncFor: IndexedFile._collect("loops"),
    ast.While: IndexedFile._collect("loops"),
    ast.Return: IndexedFile._collect("returns"),
    ast.Try: IndexedFile._collect("trys"),
    ast.If: IndexedFile._collect("ifs"),
}
if hasattr(ast, "TryStar"):
    IndexedFile._handlers[ast.TryStar] = IndexedFile._collect("trys")
for _kind in _STATEMENTS:
    IndexedFile._handlers.setdefault(_kind, IndexedFile._statement)


_POSITION = operator.attrgetter("lineno", "col_offset")  # statements and expressions have both


def _ASSIGN_POSITION(item: tuple[str, ast.stmt, AssignValue]) -> tuple[int, int]:
    stmt = item[1]
    return (stmt.lineno, stmt.col_offset)
