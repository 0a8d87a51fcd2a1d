"""autograd-collective: a c10d collective runs on a tensor that requires grad, outside no_grad."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, arith_names, dotted, is_constant_value, is_detached_value, method
from traindoc.lint.rules._common import Hit, Invalid

# collective -> index of the tensor argument it works on in place
COLLECTIVES = {"all_reduce": 0, "reduce": 0, "broadcast": 0, "all_gather": 1, "all_gather_into_tensor": 1}


class AutogradCollective:
    """``torch.distributed.all_reduce`` (or ``reduce``, ``broadcast``, ``all_gather``) is called,
    outside ``torch.no_grad()``, on the loss handed to backward or on a copy of it that still
    requires grad (``loss.clone()``). c10d collectives have no autograd kernel: PyTorch warns,
    and the in-place op changes a tensor autograd recorded (seed 000). Reducing a
    ``.detach()``ed copy or a ``.item()``-built tensor stays quiet, as do the autograd-aware
    ``torch.distributed.nn`` functions.
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
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        for scope in mod.scopes:
            if not scope.trained:
                continue
            for call in mod.named_in(scope, *COLLECTIVES):
                q = mod.callee(call)
                head, _, name = q.rpartition(".")
                if head != "torch.distributed" or name not in COLLECTIVES:
                    continue
                index = COLLECTIVES[name]
                given = call.args[index] if len(call.args) > index else None
                if not isinstance(given, ast.Name):
                    continue
                tensor = given.id
                if mod.grad_mode(call):
                    continue
                why = self._requires_grad(mod, scope, tensor, call.lineno)
                if why is None:
                    continue
                value = scope.reaching(tensor, call.lineno, mod)
                source = dotted(method(value, "clone")) if value is not None else None
                if source:
                    fix = (f"Build `{tensor}` from `{source}.detach().clone()` instead of "
                           f"`{source}.clone()`, or run the collective under `torch.no_grad()`.")
                else:
                    fix = (f"Reduce a detached copy under no_grad: `with torch.no_grad(): "
                           f"reduced = {tensor}.detach().clone(); dist.{name}(reduced)`.")
                yield Hit(
                    call,
                    f"`{mod.text(call)}` (line {call.lineno}) runs on `{tensor}`, which requires "
                    f"grad ({why}), outside `torch.no_grad()`: c10d collectives have no autograd "
                    "kernel (PyTorch warns) and the in-place reduction changes a tensor autograd "
                    "recorded",
                    cause="Reducing the loss for logging is done on the live autograd tensor "
                    "instead of a detached copy.",
                    fix=fix,
                )

    def _requires_grad(self, mod: Module, scope: Scope, name: str, line: int) -> str | None:
        value = scope.reaching(name, line, mod)
        if value is not None and (is_detached_value(mod, value) or is_constant_value(mod, value)):
            return None
        if value is not None and _escapes(value):
            return None
        if name in scope.trained:
            used = [b for b in scope.backwards if b.name == name]
            return f"it is handed to `{used[0].text()}`" if used else "it is the returned loss"
        if value is not None:
            inner = method(value, "clone")
            source = arith_names(inner if inner is not None else value) & scope.trained
            if source:
                return f"it is `{mod.text(value)}`, a copy of the loss"
        return None


def _escapes(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if method(n, "item", "detach", "tolist") is not None:
            return True
        if isinstance(n, ast.Attribute) and n.attr == "data":
            return True
    return False
