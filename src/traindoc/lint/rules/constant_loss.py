"""constant-loss: the value handed to backward is a constant, a clamp or a detached copy."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import (
    Module,
    Scope,
    arith_names,
    dotted,
    is_constant_value,
    is_detached_value,
    kwarg,
    method,
    nonfinite_checked,
    number,
    resolve,
)
from traindoc.lint.rules._common import Hit, Invalid

COMPARE = (ast.Gt, ast.GtE, ast.Lt, ast.LtE)


class ConstantLoss:
    """The loss handed to backward stops depending on the parameters on some steps: it is
    replaced by a constant under a threshold test (``if loss > 1e6: loss = torch.tensor(1e6)``),
    clamped from above (``loss = loss.clamp(max=1e6)``: zero gradient wherever the cap is
    active; also ``torch.where(loss > cap, <constant>, loss)`` and a clamp written inside the
    backward call), or rebuilt from its value (``torch.tensor(loss.item(), requires_grad=True)``,
    ``loss.detach().requires_grad_()``). The loss is followed through aliases and accumulations
    (``l = loss``, ``total = total + l``). NaN tests are ``masked-nonfinite``'s.
    """

    id: ClassVar[str] = "constant-loss"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch

            for x, y in loader:
                loss = criterion(model(x), y)
                if loss > 1e6:
                    loss = torch.tensor(1e6, device=loss.device)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            6,
        ),
        Invalid(
            """
            def compute_loss(outputs, batch):
                delta_loss = (outputs["delta"] - batch["delta"]).abs().mean()
                dag_loss = outputs["dag"].mean()
                if delta_loss.item() > 1e4:
                    delta_loss = torch.tensor(1e4)
                return delta_loss + dag_loss
            """,
            5,
        ),
        Invalid(
            """
            for x, y in loader:
                loss = criterion(model(x), y)
                loss = loss.clamp(max=100.0)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            3,
        ),
        Invalid(
            """
            import torch

            for x, y in loader:
                out = model(x)
                loss = torch.tensor(criterion(out, y).item(), requires_grad=True)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            5,
        ),
        Invalid(
            """
            for x, y in loader:
                loss = criterion(model(x), y).detach().requires_grad_()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            2,
        ),
        Invalid(
            """
            import torch

            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                torch.clamp(loss, max=50.0).backward()
                optimizer.step()
            """,
            6,
        ),
        Invalid(
            """
            import torch

            for x, y in loader:
                loss = criterion(model(x), y)
                loss = torch.where(loss > 1e3, loss.new_tensor(1e3), loss)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            5,
        ),
        Invalid(
            """
            import torch

            for step in range(max_steps):
                optimizer.zero_grad()
                total = 0
                for x, y in micro_batches(step):
                    loss = criterion(model(x), y) / accum
                    if loss.item() > 100:
                        loss = torch.tensor(25.0)
                    l = loss
                    total = total + l
                total.backward()
                optimizer.step()
            """,
            9,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        for x, y in loader:
            loss = criterion(model(x), y)
            if loss > 1e6:
                raise RuntimeError(f"loss {loss.item():.3g} above 1e6; lower the LR")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        """
        import torch
        import torch.nn.functional as F

        for x, y in loader:
            pred = model(x).clamp(min=-10.0, max=10.0)
            loss = F.huber_loss(pred, y, delta=1.0)
            loss = torch.clamp(loss, min=0.0)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            log_loss = torch.tensor(loss.item())
        """,
        """
        best = float("inf")
        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss = loss.detach()
            if loss.item() < best:
                best = loss.item()
        """,
        """
        def validate(model, loader):
            val_loss = sum(criterion(model(x), y).item() for x, y in loader)
            if val_loss > 1e6:
                val_loss = float("inf")
            return val_loss
        """,
        """
        import torch

        for x, y in loader:
            margin = 1.0 - model(x) * y
            loss = torch.where(margin > 0, margin, torch.zeros_like(margin)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        """
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            (loss / accum).backward()
            optimizer.step()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        for scope in mod.scopes:
            if scope.is_eval:
                continue
            losses = mod.loss_names(scope)
            if not losses:
                continue
            yield from self._replaced(mod, scope, losses)
            yield from self._clamped(mod, scope, losses)
            yield from self._detached(mod, scope)

    def _replaced(self, mod: Module, scope: Scope, losses: set[str]) -> Iterator[Hit]:
        for branch in scope.ifs:
            if nonfinite_checked(mod, branch.test) or mod.grad_mode(branch):
                continue
            compared: set[str] = set()
            for n in ast.walk(branch.test):
                if isinstance(n, ast.Compare) and all(isinstance(op, COMPARE) for op in n.ops):
                    for side in [n.left, *n.comparators]:
                        inner = method(side, "item")
                        compared |= arith_names(inner if inner is not None else side)
            compared &= losses
            for stmt in branch.body + branch.orelse:
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                    continue
                name = dotted(stmt.targets[0])
                if name in compared and is_constant_value(mod, stmt.value):
                    yield Hit(
                        stmt,
                        f"`{name}` is replaced by the constant `{mod.text(stmt.value)}` when "
                        f"`{mod.text(branch.test)}` (line {branch.lineno}): a constant has no "
                        "gradient, so exactly the batches with the largest error train on nothing",
                        cause="Clamping a loss by replacing it hides large errors instead of "
                        "learning from them; the replaced steps give zero gradient.",
                        fix=f"Remove the replacement of `{name}`. To limit outliers, use a robust "
                        "loss (`F.huber_loss`) or clip the gradient norm "
                        "(`torch.nn.utils.clip_grad_norm_`), not the loss value.",
                    )

    def _clamped(self, mod: Module, scope: Scope, losses: set[str]) -> Iterator[Hit]:
        for target, stmt, value in scope.assigns:
            if target in losses and isinstance(value, ast.Call) and not mod.grad_mode(stmt):
                bound = _upper_bound(mod, value, at=stmt) or _where_cap(mod, value, losses)
                if bound is not None:
                    yield self._clamp_hit(stmt, target, mod.text(value), bound)
        for b in scope.backwards:  # torch.clamp(loss, max=50).backward()
            if isinstance(b.loss, ast.Call) and _clamped_names(b.loss) & losses:
                bound = _upper_bound(mod, b.loss, at=b.call)
                if bound is not None:
                    yield self._clamp_hit(b.call, mod.text(b.loss), mod.text(b.loss), bound)
        for call in mod.named_in(scope, "clamp_", "clip_", "clamp_max_"):
            receiver = method(call, "clamp_", "clip_", "clamp_max_")
            if dotted(receiver) in losses and not mod.grad_mode(call):
                bound = _upper_bound(mod, call, at=call)
                if bound is not None:
                    yield self._clamp_hit(call, dotted(receiver) or "", mod.text(call), bound)

    def _clamp_hit(self, node: ast.AST, name: str, text: str, bound: str) -> Hit:
        return Hit(
            node,
            f"`{text}` caps `{name}` at {bound}: the gradient of a clamp is zero wherever the "
            f"cap is active, so batches whose loss exceeds {bound.split(' (')[0]} give no gradient",
            cause="The loss value handed to backward is clamped from above; on the steps where "
            "it matters most the model learns nothing.",
            fix=f"Remove the clamp on `{name}`; use a robust loss (`F.huber_loss`, "
            "`F.smooth_l1_loss`) or `torch.nn.utils.clip_grad_norm_` to limit large updates.",
        )

    def _detached(self, mod: Module, scope: Scope) -> Iterator[Hit]:
        uses = [(b.name, b.call.lineno, b.text()) for b in scope.backwards if b.name]
        for ret in scope.returns:
            if isinstance(ret.value, ast.Name) and ret.value.id in scope.trained:
                uses.append((ret.value.id, ret.lineno, f"return {ret.value.id}"))
        seen: set[int] = set()
        for name, line, where in uses:
            found = [(s, v) for s, v in scope.values_of(name, line) if not isinstance(s, ast.AugAssign)]
            if not found:
                continue
            stmt, value = found[-1]
            how = is_detached_value(mod, value)
            if how and id(stmt) not in seen:
                seen.add(id(stmt))
                yield Hit(
                    stmt,
                    f"`{name} = {how}` (line {stmt.lineno}) is what `{where}` (line {line}) "
                    "receives: it has no autograd history, so no gradient reaches the model's "
                    "parameters",
                    cause="A `.item()`/`.detach()` round trip rebuilds the loss as a new leaf "
                    "tensor; backward runs without error and every gradient is zero or None.",
                    fix=f"Hand the loss computed from the model's outputs to backward unchanged; "
                    f"call `.item()` only on a copy for logging. If `{name}` did not require "
                    "grad, find the `.detach()`/`no_grad` that cut the graph.",
                )


def _clamped_names(call: ast.Call) -> set[str]:
    """The names a clamp-like call works on: its receiver or its first argument."""
    receiver = method(call, "clamp", "clip", "clamp_max")
    if receiver is not None and not (isinstance(receiver, ast.Name) and receiver.id == "torch"):
        return arith_names(receiver)
    return arith_names(call.args[0]) if call.args else set()


def _where_cap(mod: Module, call: ast.Call, losses: set[str]) -> str | None:
    """The cap of ``torch.where(loss > cap, <constant>, loss)`` (or ``loss < cap`` with the
    constant second) as text: the loss replaced by a constant above a threshold."""
    if mod.callee(call) != "torch.where" or len(call.args) != 3:
        return None
    test, above, below = call.args
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and arith_names(test.left) & losses):
        return None
    if isinstance(test.ops[0], (ast.Gt, ast.GtE)):
        replacement = above
    elif isinstance(test.ops[0], (ast.Lt, ast.LtE)):
        replacement = below
    else:
        return None
    return mod.text(test.comparators[0]) if is_constant_value(mod, replacement) else None


def _upper_bound(mod: Module, call: ast.Call, at: ast.stmt | ast.expr) -> str | None:
    """The upper bound of a clamp-like call as text (``1e6``, or ``LOSS_CAP (1e6)`` for a name
    assigned a literal), or None when it has none."""
    text = _bound(mod, call)
    if text is None:
        return None
    node = kwarg(call, "max")
    names = [a for a in [node, *call.args] if isinstance(a, ast.Name) and a.id == text]
    if names:
        value = resolve(mod, names[0], at)
        if value is None or isinstance(value, ast.Name):
            value = mod.scopes[0].reaching(names[0].id, at.lineno)
        if number(value) is not None:
            return f"{mod.text(value)} (`{text}`)"
    return text


def _bound(mod: Module, call: ast.Call) -> str | None:
    q = mod.callee(call)
    name = q.split(".")[-1]
    receiver = method(call, "clamp", "clip", "clamp_max", "clamp_", "clip_", "clamp_max_")
    on_method = receiver is not None and not q.startswith("torch.")
    if name in ("clamp_max", "clamp_max_") and (on_method or q.startswith("torch.")):
        args = call.args if on_method else call.args[1:]
        return mod.text(args[0]) if args else (mod.text(kwarg(call, "max")) if kwarg(call, "max") else None)
    if name in ("clamp", "clip", "clamp_", "clip_") and (on_method or q in ("torch.clamp", "torch.clip")):
        top = kwarg(call, "max")
        if top is None:
            positional = call.args if on_method else call.args[1:]
            top = positional[1] if len(positional) >= 2 else None
        if top is None or (isinstance(top, ast.Constant) and top.value is None):
            return None
        return mod.text(top)
    if isinstance(call.func, ast.Name) and call.func.id == "min" and len(call.args) == 2:
        for a in call.args:
            if number(a) is not None:
                return mod.text(a)
    return None
