"""The training flow of a file, on top of its index: what is handed to backward and which names
that loss is built from, which calls step an optimizer, which modules are trained, which
functions of the file a call runs (and which calls run a function), which code repeats, which
loops run the micro-batches of one update.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

from traindoc.lint._index import IndexedFile
from traindoc.lint._nodes import arith_names, contains_word, dotted, loss_roots, method, names_in, returned_names
from traindoc.lint._scope import AssignValue, Backward, Scope
from traindoc.lint._siblings import SiblingCache


class Module(IndexedFile):
    """One parsed source file and everything the rules ask about it."""

    def __init__(self, source: str, path: str = "<string>", *, folder: Path | None = None,
                 siblings: SiblingCache | None = None) -> None:
        super().__init__(source, path, folder=folder, siblings=siblings)
        self._trained: set[str] | None = None  # trained_models, computed once
        self._loss_names_of: dict[int, set[str]] = {}
        self._targets: dict[int, Scope | None] = {}  # callee_scope, per call
        self._reach: dict[int, list[Scope]] = {}  # reached, per scope
        self._helpers: dict[tuple[int, int], list[tuple[ast.Call, Scope]]] = {}  # helpers, per (scope, node)
        self._looped: set[int] | None = None  # scopes a loop calls, for repeated
        self._callers: dict[int, list[ast.Call]] | None = None  # callers_of, per scope
        self._find_backwards()
        self._find_trained()

    def _find_backwards(self) -> None:
        for call in self.named("backward", "manual_backward"):
            b = self.backward_of(call)
            if b is not None:
                b.shown = self.text(call)
                self.scope(call).backwards.append(b)

    def backward_of(self, call: ast.Call) -> Backward | None:
        func = call.func
        q = self.callee(call)
        if q == "torch.autograd.backward" and call.args:
            return Backward(call, call.args[0], "autograd")
        if q == "torch.distributed.autograd.backward" and len(call.args) >= 2:
            # RPC training: gradients live in the context (the first argument), fresh each time
            return Backward(call, call.args[1], "dist_autograd", dotted(call.args[0]))
        if not isinstance(func, ast.Attribute) or func.attr not in ("backward", "manual_backward"):
            return None
        receiver = func.value
        owner = dotted(receiver)
        if func.attr == "manual_backward" or (
            call.args and owner and self.role(owner) in ("accelerator", "optimizer")  # fairseq, apex
        ) or (call.args and owner and contains_word(owner.split(".")[-1], ("engine", "fabric"))):
            if not call.args:
                return None
            return Backward(call, call.args[0], "wrapper", owner)
        scaled = method(receiver, "scale")
        if scaled is not None and isinstance(receiver, ast.Call) and len(receiver.args) == 1:
            return Backward(call, receiver.args[0], "scaler", dotted(scaled))
        if isinstance(receiver, ast.Call) and not isinstance(receiver.func, ast.Attribute) and not (
            self.callee(receiver).startswith("torch.")
        ):
            return None  # f(x).backward(): not a name we can follow (torch's own functions are)
        return Backward(call, receiver, "tensor")

    # -- calls into this file's own functions ---------------------------------------------------

    def callee_scope(self, call: ast.Call) -> Scope | None:
        """The function or method defined in this file that ``call`` runs: ``train_step(...)``
        (the only function of that name, not shadowed by an import) or ``self._step(...)`` (the
        only method of that name in the caller's class). None for anything else: the callee is
        never guessed."""
        key = id(call)
        if key not in self._targets:
            self._targets[key] = self._callee_scope(call)
        return self._targets[key]

    def _callee_scope(self, call: ast.Call) -> Scope | None:
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in self.aliases:
                return None
            found = [s for s in self.functions.get(func.id, ()) if s.cls is None and s.name != "<lambda>"]
            if not found and func.id[:1].isupper():  # Trainer(model, args) runs Trainer.__init__
                found = [s for s in self.functions.get("__init__", ()) if s.cls == func.id]
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            cls = self.scope(call).cls
            found = [s for s in self.functions.get(func.attr, ()) if cls is not None and s.cls == cls]
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
            func.attr in self.sibling_modules.get(func.value.id, ())
        ):
            # ``utils.step(opt)`` with ``import utils``: the sibling's function, appended to this tree
            found = [s for s in self.functions.get(func.attr, ()) if s.cls is None and s.name != "<lambda>"]
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id not in self.aliases:
            # ``Steps.save(...)``: a static or class method of a class of this file
            found = [s for s in self.functions.get(func.attr, ()) if s.cls == func.value.id]
        else:
            return None
        return found[0] if len(found) == 1 else None

    def calls_in(self, scope: Scope, node: ast.AST | None = None) -> list[ast.Call]:
        """The calls of ``scope`` (in source order), only those inside ``node`` when given."""
        if node is None:
            return scope.calls
        start, end = getattr(node, "lineno", 0), getattr(node, "end_lineno", None) or 10**9
        return [c for c in scope.calls if start <= c.lineno <= end and (c.lineno > start or self.inside(c, node))]

    def helpers(self, scope: Scope, node: ast.AST | None = None) -> list[tuple[ast.Call, Scope]]:
        """The functions of this file that run when ``node`` (default: all of ``scope``) runs,
        each with the call in ``scope`` that leads to it; followed three calls deep."""
        key = (id(scope), id(node))
        if key in self._helpers:
            return self._helpers[key]
        out: list[tuple[ast.Call, Scope]] = []
        for call in self.calls_in(scope, node):
            target = self.callee_scope(call)
            if target is not None and target is not scope:
                out += [(call, s) for s in self.reached(target)]
        self._helpers[key] = out
        return out

    def reached(self, scope: Scope) -> list[Scope]:
        """``scope`` and the functions of this file it calls, three calls deep."""
        key = id(scope)
        if key not in self._reach:
            found, seen, level = [scope], {key}, [scope]
            for _ in range(3):
                deeper: list[Scope] = []
                for caller in level:
                    for call in caller.calls:
                        target = self.callee_scope(call)
                        if target is not None and id(target) not in seen:
                            seen.add(id(target))
                            deeper.append(target)
                found += deeper
                level = deeper
            self._reach[key] = found
        return self._reach[key]

    def backwards_in(self, scope: Scope, node: ast.AST | None = None) -> list[tuple[ast.Call, Backward]]:
        """Backward passes that run inside ``node``: (the call site in ``scope``, the backward);
        the site is the backward's own call when it is written there."""
        out = [(b.call, b) for b in scope.backwards if node is None or self.inside(b.call, node)]
        for site, helper in self.helpers(scope, node):
            out += [(site, b) for b in helper.backwards]
        return out

    def steps_in(self, scope: Scope, node: ast.AST | None = None) -> list[tuple[ast.Call, ast.Call, str]]:
        """Optimizer steps that run inside ``node``: (the call site in ``scope``, the step call,
        the optimizer's name)."""
        out = [(c, c, o) for c, o in self.optimizer_steps(scope) if node is None or self.inside(c, node)]
        for site, helper in self.helpers(scope, node):
            out += [(site, c, o) for c, o in self.optimizer_steps(helper)]
        return out

    def callers_of(self, scope: Scope) -> list[ast.Call]:
        """The calls in this file that run ``scope`` (as ``callee_scope`` finds them)."""
        if self._callers is None:
            self._callers = {}
            for call in self.calls:
                target = self.callee_scope(call)
                if target is not None:
                    self._callers.setdefault(id(target), []).append(call)
        return self._callers.get(id(scope), [])

    def repeated(self, node: ast.AST) -> bool:
        """``node`` runs many times: inside a loop of its function, or in a function of this
        file that a loop calls (three calls deep)."""
        if self.loops_around(node):
            return True
        if self._looped is None:
            self._looped = {
                id(h) for scope in self.scopes for loop in scope.loops for _, h in self.helpers(scope, loop)
            }
        return id(self.scope(node)) in self._looped

    def iterated(self, loop: ast.stmt) -> ast.expr | None:
        """What a loop draws its items from: a ``for`` loop's iterable, or ``X`` of a ``while``
        loop's ``item = next(it)`` with ``it = iter(X)`` before it."""
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            return loop.iter
        drawn = _drawn_from(self, loop) if isinstance(loop, ast.While) else None
        return drawn[1] if drawn else None

    def micro_count(self, loop: ast.AST) -> str | None:
        """How many micro-batches ``loop`` runs, as text (``gradient_accumulation_steps``,
        ``len(micro_batches)``), when it is a loop over the micro-batches of one update (its
        target or iterable says so: micro, accum, chunk, split, mb); None for any other loop."""
        if isinstance(loop, ast.While):  # it = iter(micro_batches); while True: mb = next(it)
            drawn = _drawn_from(self, loop)
            if drawn is None:
                return None
            target, it = drawn
        elif isinstance(loop, (ast.For, ast.AsyncFor)):
            target, it = loop.target, loop.iter
        else:
            return None
        text = f"{self.text(target)} {self.text(it)}".lower()
        if not any(w in text for w in MICRO_WORDS):
            return None
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and it.args:
            it = it.args[0]
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1:
            return self.text(it.args[0])
        return f"len({self.text(it, 40)})"

    def _find_trained(self) -> None:
        """Names handed to backward in each scope, plus what loss functions return.

        A loss function is one whose result is handed to backward in this file, one named
        ``training_step`` / ``compute_loss`` (the framework does the backward), one named like
        a loss (``focal_loss``), or ``forward`` of a class named ``*Loss``.
        """
        for scope in self.scopes:
            for b in scope.backwards:
                scope.trained |= loss_roots(self._unwrapped(b.loss))
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

    def _unwrapped(self, expr: ast.expr) -> ast.expr:
        """``clamp(loss, max=c)`` with torch's clamp imported bare or aliased: ``loss``."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.args and self.callee(expr) in (
            "torch.clamp", "torch.clip", "torch.clamp_max", "torch.nan_to_num"
        ):
            return expr.args[0]
        return expr

    def loss_names(self, scope: Scope) -> set[str]:
        """The trained names and, through arithmetic, the loss terms they are summed from."""
        key = id(scope)
        if key not in self._loss_names_of:
            self._loss_names_of[key] = self._loss_names(scope)
        return self._loss_names_of[key]

    def _loss_names(self, scope: Scope) -> set[str]:
        return scope.closure(scope.trained, lambda name, _, value: _loss_terms(name, value))

    def depends(self, scope: Scope, names: set[str]) -> set[str]:
        """Every name the values of ``names`` are computed from in ``scope`` (any expression)."""
        return scope.closure(names, lambda _, __, value: names_in(value))

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
        out |= self._forward_models()
        return out

    def _forward_models(self) -> set[str]:
        """Modules whose output a backward pass is computed from (``loss = model(mb)``,
        ``criterion(model(x), y).backward()``): trained whatever built their optimizer. Loss
        functions (``criterion``, ``nn.CrossEntropyLoss()``, ``F.mse_loss``) and functions of
        this file are not modules."""
        out: set[str] = set()
        for scope in self.scopes:
            if not scope.backwards:
                continue
            # two assignments back from the loss: `out = model(x); loss = crit(out, y)`
            exprs: list[ast.AST] = [b.loss for b in scope.backwards]
            names = {n for b in scope.backwards for n in loss_roots(self._unwrapped(b.loss))}
            for _ in range(2):
                values = [v for n in names for _, v in scope.values_of(n)]
                exprs += values
                names = {n for v in values for n in arith_names(v.value if isinstance(v, ast.AugAssign) else v)}
                names |= {a.id for v in values if isinstance(v, ast.Call) for a in v.args if isinstance(a, ast.Name)}
            for expr in exprs:
                for call in ast.walk(expr):
                    if not isinstance(call, ast.Call):
                        continue
                    name = dotted(call.func)
                    if name and self._is_module_name(name):
                        out.add(name)
        return out

    def _is_module_name(self, name: str) -> bool:
        last = name.split(".")[-1]
        if last in self.functions or contains_word(last, ("loss", "criterion", "crit", "metric")):
            return False
        if (self.qualname(ast.Name(name.split(".")[0])) or "").startswith(("torch", "math", "numpy")):
            return False
        if "." in name and not name.startswith("self."):
            return False  # x.mean(), F.relu(...): a method or a module-level function
        built = self.built.get(name, [])
        return not any(self.callee(c).endswith("Loss") for c in built) and last not in _BUILTINS



_BUILTINS = frozenset(dir(builtins))
# Words that mark a loop over the micro-batches of one update.
MICRO_WORDS = ("micro", "accum", "chunk", "split", "mb")

def _drawn_from(mod: Module, loop: ast.While) -> tuple[ast.expr, ast.expr] | None:
    """(target, iterable) of ``target = next(it)`` in a while loop, with ``it = iter(iterable)``
    before it."""
    for stmt in ast.walk(loop):
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)):
            continue
        call = stmt.value
        if not (isinstance(call.func, ast.Name) and call.func.id == "next" and call.args):
            continue
        source = call.args[0]
        if isinstance(source, ast.Name):
            value = mod.scope(loop).reaching(source.id, loop.lineno)
            if isinstance(value, ast.Call) and dotted(value.func) == "iter" and value.args:
                return stmt.targets[0], value.args[0]
        return stmt.targets[0], source
    return None


# Names with "loss" in them that scale a loss rather than hold one (``loss_weight``).
FACTOR_WORDS = ("weight", "scale", "coef", "factor", "mask", "lambda")


def _loss_terms(name: str, value: AssignValue) -> set[str]:
    """The names the loss ``name`` is made of through ``value``: the name of an alias
    (``total = l``) and every name of an accumulation (``total = total + l``, ``total += l``);
    otherwise only the names that say they are a loss (``loss = ce_loss + w * aux_loss`` gives
    ``ce_loss`` and ``aux_loss``, not ``w``)."""
    expr = value.value if isinstance(value, ast.AugAssign) else value
    if contains_word(name, FACTOR_WORDS):
        return {n for n in arith_names(expr) if "loss" in n.lower()}  # a weight, not a loss
    if isinstance(expr, ast.Name):
        return {expr.id}
    if isinstance(value, ast.AugAssign) and isinstance(value.op, (ast.Add, ast.Sub)):
        return arith_names(expr)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add) and name in arith_names(expr):
        return arith_names(expr)
    return {n for n in arith_names(expr) if "loss" in n.lower()}
