"""missing-zero-grad: a training loop steps the optimizer but nothing ever clears gradients."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, method
from traindoc.lint.rules._common import Hit, Invalid


class MissingZeroGrad:
    """A loop calls backward and ``optimizer.step()`` while nothing in the file clears
    gradients: no ``zero_grad()`` on any object, no ``p.grad = None``, no ``p.grad.zero_()``.
    Each step then adds this batch's gradient to every previous one. Quiet for engines that
    clear gradients themselves (``engine.backward(loss); engine.step()`` in DeepSpeed).
    """

    id: ClassVar[str] = "missing-zero-grad"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch

            model = Net()
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            for epoch in range(10):
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
            """,
            9,
        ),
        Invalid(
            """
            def train(model, opt, scaler, loader):
                for x, y in loader:
                    with torch.autocast("cuda", dtype=torch.float16):
                        loss = model(x, y)
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
            """,
            6,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            model.zero_grad(set_to_none=True)
        """,
        """
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            for p in model.parameters():
                p.grad = None
        """,
        """
        for batch in loader:
            loss = model_engine(batch)
            model_engine.backward(loss)
            model_engine.step()
        """,
        """
        def closure():
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            return loss

        for _ in range(20):
            optimizer.step(closure)
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        if not any(scope.backwards for scope in mod.scopes) or _clears_gradients(mod):
            return
        for scope in mod.scopes:
            if not scope.backwards:
                continue
            steps = mod.optimizer_steps(scope)
            for loop in scope.loops:
                inside_b = [b for b in scope.backwards if mod.inside(b.call, loop) and b.via != "wrapper"]
                inside_s = [
                    (c, o) for c, o in steps if mod.inside(c, loop) and not _built_inside(mod, scope, o, loop)
                ]
                if inside_b and inside_s:
                    call, opt = inside_s[0]
                    b = inside_b[0]
                    yield Hit(
                        call,
                        f"`{opt}` steps (line {call.lineno}) after `{b.text()}` (line "
                        f"{b.call.lineno}) in a loop, and nothing in this file clears the "
                        "gradients: every step adds this batch's gradient to all previous ones",
                        cause="Without `zero_grad()` the `.grad` tensors accumulate across "
                        "steps; the update grows step after step and follows old batches.",
                        fix=f"Call `{opt}.zero_grad(set_to_none=True)` once per step, before the "
                        "forward pass or right after the optimizer step.",
                    )
                    break  # one finding per scope: the outer loop holds the inner one


def _built_inside(mod: Module, scope: Scope, opt: str, loop: ast.AST) -> bool:
    """The optimizer is built afresh inside the loop: each one steps once, nothing accumulates
    across its steps (a numerics check, not a training loop)."""
    return any(mod.inside(stmt, loop) for stmt, _ in scope.values_of(opt))


def _clears_gradients(mod: Module) -> bool:
    if any("zero_grad" in name for name in mod.by_name):
        return True
    for call in mod.named("zero_", "detach_", "fill_", "mul_"):
        receiver = method(call, "zero_", "detach_", "fill_", "mul_")
        if isinstance(receiver, ast.Attribute) and receiver.attr == "grad":
            return True
        if isinstance(receiver, ast.Attribute) and receiver.attr == "data":
            inner = receiver.value
            if isinstance(inner, ast.Attribute) and inner.attr == "grad":
                return True
    return any(t.endswith(".grad") for scope in mod.scopes for t, _, _ in scope.assigns)
