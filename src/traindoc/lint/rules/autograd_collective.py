"""autograd-collective: a c10d collective runs on a tensor that requires grad, outside no_grad."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import (
    Module, Scope, arg, arith_names, dotted, is_constant_value, is_detached_value, method, names_in,
)
from traindoc.lint.rules._common import Hit, Invalid

# collective -> index of the tensor argument it works on in place
COLLECTIVES = {"all_reduce": 0, "reduce": 0, "broadcast": 0, "all_gather": 1, "all_gather_into_tensor": 1}


class AutogradCollective:
    """``torch.distributed.all_reduce`` (or ``reduce``, ``broadcast``, ``all_gather``) is called,
    outside ``torch.no_grad()``, on the loss handed to backward or on a copy of it that still
    requires grad (``loss.clone()``). c10d collectives have no autograd kernel: PyTorch warns,
    and the in-place op changes a tensor autograd recorded (seed 000). Reducing a
    ``.detach()``ed copy or a ``.item()``-built tensor stays quiet, as do the autograd-aware
    ``torch.distributed.nn`` functions. Also followed: a tensor built from the loss
    (``torch.stack([loss, acc])``) or a trained model's output, the parameters of a model
    averaged in a loop over ``model.parameters()`` (local SGD without ``no_grad``), and a
    function of this file that reduces what its caller hands it.
    """

    id: ClassVar[str] = "autograd-collective"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch.distributed as dist

            for x, y in loader:
                loss = criterion(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                dist.all_reduce(loss)
                loss = loss / dist.get_world_size()
            """,
            8,
        ),
        Invalid(
            """
            import torch.distributed as dist

            def train_step(model, batch, optimizer):
                loss = model(batch)
                reduced = loss.clone()
                dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
                loss.backward()
                optimizer.step()
                return reduced
            """,
            6,
        ),
        Invalid(
            """
            import torch
            import torch.distributed as dist

            for x, y in loader:
                out = model(x)
                loss = criterion(out, y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                stats = torch.stack([loss, (out.argmax(1) == y).float().mean()])
                dist.all_reduce(stats, op=dist.ReduceOp.AVG)
            """,
            11,
        ),
        Invalid(
            """
            import torch.distributed as dist

            def average_parameters(model):
                size = float(dist.get_world_size())
                for param in model.parameters():
                    dist.all_reduce(param, op=dist.ReduceOp.SUM)
                    param.data /= size

            for step, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
                if step % sync_every == 0:
                    average_parameters(model)
            """,
            6,
        ),
        Invalid(
            """
            import torch.distributed as dist

            def reduce_mean(t):
                dist.all_reduce(t)
                return t / dist.get_world_size()

            for x, y in loader:
                loss = criterion(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                print(reduce_mean(loss).item())
            """,
            4,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch
        import torch.distributed as dist

        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                dist.all_reduce(loss)
        """,
        """
        import torch.distributed as dist

        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            reduced = loss.detach().clone()
            dist.all_reduce(reduced)
        """,
        """
        import torch
        import torch.distributed as dist

        def train_epoch(model, loader, optimizer):
            total = torch.zeros(2, device="cuda")
            for x, y in loader:
                loss = criterion(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += torch.tensor([loss.item(), 1.0], device="cuda")
            dist.all_reduce(total)
            return total
        """,
        """
        import torch
        import torch.distributed as dist

        def average_parameters(model):
            size = float(dist.get_world_size())
            with torch.no_grad():
                for param in model.parameters():
                    dist.all_reduce(param)
                    param /= size

        def average_gradients(model):
            for param in model.parameters():
                dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
                param.grad /= dist.get_world_size()
        """,
        """
        import torch.distributed as dist

        def reduce_mean(t):
            t = t.detach().clone()
            dist.all_reduce(t)
            return t / dist.get_world_size()

        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(reduce_mean(loss).item())
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        for scope in mod.scopes:
            for call in mod.named_in(scope, *COLLECTIVES):
                q = mod.callee(call)
                head, _, name = q.rpartition(".")
                if head != "torch.distributed" or name not in COLLECTIVES:
                    continue
                index = COLLECTIVES[name]
                given = call.args[index] if len(call.args) > index else None
                if not isinstance(given, ast.Name) or mod.grad_mode(call):
                    continue
                tensor = given.id
                why = self._requires_grad(mod, scope, tensor, call) or self._handed_in(mod, scope, tensor, call)
                if why is None:
                    continue
                value = scope.reaching(tensor, call.lineno, mod)
                source = dotted(method(value, "clone")) if value is not None else None
                if source:
                    fix = (f"Build `{tensor}` from `{source}.detach().clone()` instead of "
                           f"`{source}.clone()`, or run the collective under `torch.no_grad()`.")
                elif why.startswith("it is a parameter"):
                    fix = f"Run the loop under `with torch.no_grad():` (or reduce `{tensor}.data`)."
                else:
                    fix = (f"Reduce a detached copy under no_grad: `with torch.no_grad(): "
                           f"reduced = {tensor}.detach().clone(); dist.{name}(reduced)`.")
                yield Hit(
                    call,
                    f"`{mod.text(call)}` (line {call.lineno}) runs on `{tensor}`, which requires "
                    f"grad ({why}), outside `torch.no_grad()`: c10d collectives have no autograd "
                    "kernel (PyTorch warns) and the in-place reduction changes a tensor autograd "
                    "recorded",
                    cause="A collective meant for logging or averaging runs on a live autograd "
                    "tensor instead of a detached copy.",
                    fix=fix,
                )

    def _requires_grad(self, mod: Module, scope: Scope, name: str, call: ast.Call) -> str | None:
        line = call.lineno
        value = scope.reaching(name, line, mod)
        if value is not None and (is_detached_value(mod, value) or is_constant_value(mod, value)):
            return None
        if value is not None and (_escapes(value) or mod.callee(value) == "torch.tensor"):
            return None  # torch.tensor(x) copies the data, without autograd history
        if name in scope.trained:
            used = [b for b in scope.backwards if b.name == name]
            return f"it is handed to `{used[0].text()}`" if used else "it is the returned loss"
        if value is not None:
            inner = method(value, "clone")
            source = arith_names(inner if inner is not None else value) & scope.trained
            if source:
                return f"it is `{mod.text(value)}`, a copy of the loss"
            built = names_in(value) & scope.trained
            if built:
                return f"it is `{mod.text(value)}`, built from `{sorted(built)[0]}`"
            models = mod.trained_models() - {"self"}
            if isinstance(value, ast.Call) and dotted(value.func) in models and _in_place(mod, call):
                return f"it is the output of `{dotted(value.func)}`"
        if value is None and _in_place(mod, call) and mod.callee(call).endswith("reduce"):
            model = _parameters_loop(mod, name, call)
            if model:
                return f"it is a parameter of `{model}`"
        return None

    def _handed_in(self, mod: Module, scope: Scope, name: str, call: ast.Call) -> str | None:
        """``name`` is a parameter of this function, not reassigned before ``call``, and a
        caller in this file hands it a tensor that requires grad."""
        fn = scope.node
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or scope.values_of(name, call.lineno):
            return None
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if name not in params:
            return None
        index = params.index(name) - (1 if params[0] == "self" else 0)
        for site in mod.callers_of(scope):
            given = arg(site, index, name)  # by position or by keyword
            if isinstance(given, ast.Name):
                why = self._requires_grad(mod, mod.scope(site), given.id, site)
                if why:
                    return f"`{mod.text(site)}` at line {site.lineno} hands it `{given.id}`; {why}"
        return None


def _in_place(mod: Module, call: ast.Call) -> bool:
    """The collective overwrites its tensor (``all_reduce``, ``reduce``, ``broadcast``); an
    ``all_gather`` of features whose local slot is put back afterwards is a common, working
    idiom, so only in-place collectives are judged on model outputs and parameters."""
    return mod.callee(call).rpartition(".")[2] in ("all_reduce", "reduce", "broadcast")


def _parameters_loop(mod: Module, name: str, call: ast.Call) -> str | None:
    """The model whose parameters ``name`` iterates over in a loop around ``call``
    (``for p in model.parameters()``, ``for n, p in model.named_parameters()``)."""
    for loop in mod.loops_around(call):
        if not isinstance(loop, ast.For):
            continue
        target = loop.target
        if isinstance(target, ast.Tuple) and len(target.elts) == 2:
            target = target.elts[1]
        if isinstance(target, ast.Name) and target.id == name:
            model = method(loop.iter, "parameters", "named_parameters")
            return dotted(model) if model is not None else None
    return None


def _escapes(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if method(n, "item", "detach", "tolist") is not None:
            return True
        if isinstance(n, ast.Attribute) and n.attr == "data":
            return True
    return False
