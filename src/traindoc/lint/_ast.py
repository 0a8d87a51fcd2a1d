"""What every lint rule shares: one pass over a file's AST and the names it can follow.

``Module`` parses a file once and indexes it: import aliases (so ``nn.utils.clip_grad_norm_``
resolves to ``torch.nn.utils.clip_grad_norm_``), the parent of every node, and per function
("scope") its calls, assignments, ``with`` blocks, loops and returns. On top of that it answers
the questions the rules ask, always by following names through a function and through simple
assignments, never further:

- what is handed to ``backward`` (``loss.backward()``, ``scaler.scale(loss).backward()``,
  ``accelerator.backward(loss)``) and which names that loss is built from;
- which names are optimizers, schedulers, GradScalers (by the call that built them, or by the
  name they go by when they arrive as a function argument);
- whether a node runs under ``torch.no_grad()`` / ``torch.inference_mode()``.

Nothing here imports torch; it reads source only.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Union

from traindoc.lint._nodes import (  # noqa: F401  (re-exported for the rules)
    EVAL_WORDS,
    LOOP_TYPES,
    LOW_PRECISION,
    OPTIMIZER_CLASSES,
    SCALER_CLASSES,
    TENSOR_FACTORIES,
    arg,
    arith_names,
    contains_word,
    dotted,
    kwarg,
    loss_roots,
    method,
    names_in,
    number,
    returned_names,
    unparse,
)
from traindoc.lint._values import (  # noqa: F401  (re-exported for the rules)
    fixed_filename,
    is_constant_value,
    is_detached_value,
    nonfinite_checked,
    resolve,
    torch_saves,
)

ScopeNode = Union[ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda]
# What a name is assigned: the expression; for ``x += ...`` the statement itself.
AssignValue = Union[ast.expr, ast.AugAssign]


@dataclass
class Backward:
    """One backward pass: ``loss`` is the expression handed to it."""

    call: ast.Call
    loss: ast.expr
    via: str  # "tensor" (loss.backward()), "scaler" (scaler.scale(loss).backward()), "wrapper"
    owner: str | None = None  # the scaler or wrapper (accelerator, fabric, engine) by name
    shown: str = ""  # the call as written in the source

    @property
    def name(self) -> str | None:
        return self.loss.id if isinstance(self.loss, ast.Name) else None

    def text(self) -> str:
        return self.shown or unparse(self.call)


@dataclass
class Scope:
    """A function body (or the module body): the unit through which names are followed."""

    node: ScopeNode
    name: str
    cls: str | None = None
    calls: list[ast.Call] = field(default_factory=list)
    assigns: list[tuple[str, ast.stmt, AssignValue]] = field(default_factory=list)
    withs: list[ast.With | ast.AsyncWith] = field(default_factory=list)
    loops: list[ast.stmt] = field(default_factory=list)
    returns: list[ast.Return] = field(default_factory=list)
    trys: list[ast.Try] = field(default_factory=list)
    ifs: list[ast.If] = field(default_factory=list)
    backwards: list[Backward] = field(default_factory=list)
    trained: set[str] = field(default_factory=set)  # names whose value is handed to backward

    def values_of(self, name: str, before: int | None = None) -> list[tuple[ast.stmt, AssignValue]]:
        """Assignments ``name = value`` in this scope (in source order), optionally before a line.

        An augmented assignment ``name /= n`` is given as the statement itself.
        """
        return [
            (stmt, value)
            for target, stmt, value in self.assigns
            if target == name and (before is None or stmt.lineno < before)
        ]

    def reaching(self, name: str, line: int, mod: Module | None = None) -> ast.expr | None:
        """The value of the last plain assignment to ``name`` before ``line``; with ``mod``,
        the last one not hidden in a branch (``if``/``try``) that ``line`` is outside of."""
        # Plain assignments: the value of an augmented one is its statement (s is v).
        found = [(s, v) for s, v in self.values_of(name, line) if not isinstance(v, ast.AugAssign)]
        if mod is not None:
            for stmt, value in reversed(found):
                if not any(
                    isinstance(a, (ast.If, ast.Try)) and not (a.lineno <= line <= (a.end_lineno or a.lineno))
                    for a in mod.ancestors(stmt)
                ):
                    return value
        return found[-1][1] if found else None

    @property
    def is_eval(self) -> bool:
        return contains_word(self.name, ("eval", "valid", "test", "metric", "predict", "infer"))


# A handler of Module._index: (module, parent, child, scope) -> whether the child opens a scope
# (scope_of[child] is then set). ``child`` is Any: it is of the node type the handler is filed
# under in Module._handlers, which a dict from types to handlers cannot express.
_Handler = Callable[["Module", ast.AST, Any, Scope], bool]


class Module:
    """One parsed source file and everything the rules ask about it."""

    def __init__(self, source: str, path: str = "<string>") -> None:
        self.path = path
        self.source = source
        self.tree = ast.parse(source, filename=path)
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
        # Answers computed once (by constructors, trained_models, loss_names, _values.torch_saves).
        self._constructors: list[ast.Call] | None = None
        self._trained: set[str] | None = None
        self._loss_names_of: dict[int, set[str]] = {}
        self._torch_saves: list[tuple[ast.Call, ast.expr | None, ast.expr | None, ast.Call]] | None = None
        self._index()
        self._find_backwards()
        self._find_trained()

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

    def _on_import(self, node: ast.AST, child: ast.Import, scope: Scope) -> bool:
        for alias in child.names:
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                root = alias.name.split(".")[0]
                self.aliases[root] = root
        return False

    def _on_import_from(self, node: ast.AST, child: ast.ImportFrom, scope: Scope) -> bool:
        base = "." * child.level + (child.module or "")
        for alias in child.names:
            self.aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        return False

    def _statement(self, node: ast.AST, child: ast.AST, scope: Scope) -> bool:
        return False

    @staticmethod
    def _collect(group: str) -> _Handler:
        def on(self: Module, node: ast.AST, child: ast.AST, scope: Scope) -> bool:
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

    def is_torch(self, call: ast.AST, *names: str) -> bool:
        """``call`` calls ``torch.<name>`` (through any import alias) for one of ``names``."""
        q = self.callee(call)
        return any(q == f"torch.{n}" for n in names)

    def is_dtype(self, node: ast.AST | None, scope: Scope | None = None) -> str | None:
        """'torch.bfloat16' etc. when ``node`` is (or names, via one assignment) a low precision."""
        q = self.qualname(node)
        if q in LOW_PRECISION:
            return q
        if isinstance(node, ast.Name) and scope is not None:
            value = scope.reaching(node.id, node.lineno)
            if value is None and scope.name != "<module>":
                value = self.scopes[0].reaching(node.id, node.lineno)
            q = self.qualname(value)
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

    # -- training flow ------------------------------------------------------------------------

    def _find_backwards(self) -> None:
        for call in self.named("backward", "manual_backward"):
            b = self.backward_of(call)
            if b is not None:
                b.shown = self.text(call)
                self.scope(call).backwards.append(b)

    def backward_of(self, call: ast.Call) -> Backward | None:
        func = call.func
        if self.callee(call) == "torch.autograd.backward" and call.args:
            return Backward(call, call.args[0], "autograd")
        if not isinstance(func, ast.Attribute) or func.attr not in ("backward", "manual_backward"):
            return None
        receiver = func.value
        owner = dotted(receiver)
        if func.attr == "manual_backward" or (
            call.args and owner and self.role(owner) == "accelerator"
        ) or (call.args and owner and contains_word(owner.split(".")[-1], ("engine", "fabric"))):
            if not call.args:
                return None
            return Backward(call, call.args[0], "wrapper", owner)
        scaled = method(receiver, "scale")
        if scaled is not None and isinstance(receiver, ast.Call) and len(receiver.args) == 1:
            return Backward(call, receiver.args[0], "scaler", dotted(scaled))
        if isinstance(receiver, ast.Call) and not isinstance(receiver.func, ast.Attribute):
            return None  # f(x).backward(): not a name we can follow
        return Backward(call, receiver, "tensor")

    def _find_trained(self) -> None:
        """Names handed to backward in each scope, plus what loss functions return.

        A loss function is one whose result is handed to backward in this file, one named
        ``training_step`` / ``compute_loss`` (the framework does the backward), one named like
        a loss (``focal_loss``), or ``forward`` of a class named ``*Loss``.
        """
        for scope in self.scopes:
            for b in scope.backwards:
                scope.trained |= loss_roots(b.loss)
        loss_fns: set[int] = set()
        for scope in self.scopes:
            name = scope.name
            if name in ("training_step", "compute_loss") or (
                "loss" in name.lower() and not scope.is_eval
            ) or (name == "forward" and (scope.cls or "").endswith("Loss")):
                loss_fns.add(id(scope))
        for _ in range(3):  # a loss function may call another loss function
            changed = False
            for scope in self.scopes:
                for target, stmt, value in scope.assigns:
                    if target not in scope.trained or not isinstance(value, ast.Call):
                        continue
                    callee = dotted(value.func) or ""
                    short = callee[5:] if callee.startswith("self.") else callee
                    for fn in self.functions.get(short, ()):
                        if id(fn) not in loss_fns:
                            loss_fns.add(id(fn))
                            changed = True
            for scope in self.scopes:
                if id(scope) in loss_fns:
                    before = len(scope.trained)
                    for ret in scope.returns:
                        scope.trained |= returned_names(ret.value)
                    changed |= len(scope.trained) != before
            if not changed:
                break

    def loss_names(self, scope: Scope) -> set[str]:
        """The trained names and, through arithmetic, the loss terms they are summed from."""
        key = id(scope)
        if key not in self._loss_names_of:
            self._loss_names_of[key] = self._loss_names(scope)
        return self._loss_names_of[key]

    def _loss_names(self, scope: Scope) -> set[str]:
        out = set(scope.trained)
        todo = list(out)
        while todo:
            name = todo.pop()
            for _, value in scope.values_of(name):
                for n in arith_names(value if not isinstance(value, ast.AugAssign) else value.value):
                    if n not in out and "loss" in n.lower():
                        out.add(n)
                        todo.append(n)
        return out

    def depends(self, scope: Scope, names: set[str]) -> set[str]:
        """Every name the values of ``names`` are computed from in ``scope`` (any expression)."""
        out = set(names)
        todo = list(names)
        while todo:
            name = todo.pop()
            for _, value in scope.values_of(name):
                for n in names_in(value):
                    if n not in out:
                        out.add(n)
                        todo.append(n)
        return out

    def optimizer_steps(self, scope: Scope) -> list[tuple[ast.Call, str]]:
        """``opt.step()`` and ``scaler.step(opt)`` calls in ``scope``, with the optimizer's name."""
        out = []
        for call in self.named_in(scope, "step"):
            receiver = method(call, "step")
            owner = dotted(receiver)
            if owner is None:
                continue
            role = self.role(owner)
            if role == "optimizer":
                out.append((call, owner))
            elif role == "scaler" and call.args:
                out.append((call, dotted(call.args[0]) or owner))
        return out

    def trained_models(self) -> set[str]:
        """Names of modules being trained: their ``.parameters()`` go to an optimizer, or they
        are put in train mode with ``.train()``."""
        if self._trained is None:
            self._trained = self._trained_models()
        return self._trained

    def _trained_models(self) -> set[str]:
        out: set[str] = set()
        for call in self.constructors():
            if self.kind_of_call(call) == "optimizer":
                for n in ast.walk(call):
                    receiver = method(n, "parameters", "named_parameters")
                    name = dotted(receiver)
                    if name:
                        out.add(name)
        for call in self.named("train"):
            name = dotted(method(call, "train"))
            if name and not call.args:
                out.add(name)
        return out

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
Module._handlers = {
    ast.FunctionDef: Module._on_function,
    ast.AsyncFunctionDef: Module._on_function,
    ast.Lambda: Module._on_function,
    ast.Call: Module._on_call,
    ast.Assign: Module._on_assign,
    ast.AnnAssign: Module._on_augassign,
    ast.AugAssign: Module._on_augassign,
    ast.Import: Module._on_import,
    ast.ImportFrom: Module._on_import_from,
    ast.With: Module._collect("withs"),
    ast.AsyncWith: Module._collect("withs"),
    ast.For: Module._collect("loops"),
    ast.AsyncFor: Module._collect("loops"),
    ast.While: Module._collect("loops"),
    ast.Return: Module._collect("returns"),
    ast.Try: Module._collect("trys"),
    ast.If: Module._collect("ifs"),
}
if hasattr(ast, "TryStar"):
    Module._handlers[ast.TryStar] = Module._collect("trys")
for _kind in _STATEMENTS:
    Module._handlers.setdefault(_kind, Module._statement)


_POSITION = operator.attrgetter("lineno", "col_offset")  # statements and expressions have both


def _ASSIGN_POSITION(item: tuple[str, ast.stmt, AssignValue]) -> tuple[int, int]:
    stmt = item[1]
    return (stmt.lineno, stmt.col_offset)
