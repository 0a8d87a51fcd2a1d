"""grad-cleared-before-step: ``zero_grad()`` runs between backward and the optimizer step."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, dotted, method
from traindoc.lint.rules._common import Hit, Invalid


class GradClearedBeforeStep:
    """In one block, ``loss.backward()`` is followed by ``optimizer.zero_grad()`` and then
    ``optimizer.step()`` on the same optimizer, with no backward in between: the step sees
    zero (or no) gradients and only weight decay and momentum move the weights. Quiet when
    another backward refills the gradients before the step (GAN-style alternating updates).
    """

    id: ClassVar[str] = "grad-cleared-before-step"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.zero_grad()
                optimizer.step()
            """,
            4,
        ),
        Invalid(
            """
            def train_step(self, batch):
                loss = self.model(**batch).loss
                self.scaler.scale(loss).backward()
                self.optimizer.zero_grad(set_to_none=True)
                self.scaler.step(self.optimizer)
                self.scaler.update()
            """,
            4,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        """,
        """
        for real in loader:
            opt_d.zero_grad()
            loss_d = d_loss(netD, netG, real)
            loss_d.backward()
            opt_d.step()
            opt_g.zero_grad()
            loss_g = g_loss(netD, netG, real)
            loss_g.backward()
            opt_g.step()
        """,
        """
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y) / accum_steps
            loss.backward()
            if (i + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        for scope in mod.scopes:
            if not scope.backwards:
                continue
            blocks: dict[int, list[ast.stmt]] = {}
            for b in scope.backwards:
                for node in [b.call, *mod.ancestors(b.call)]:
                    if isinstance(node, ast.stmt):
                        block = _block_of(mod, node)
                        if block is not None:
                            blocks[id(block)] = block
            for block in blocks.values():
                yield from self._check_block(mod, block)

    def _check_block(self, mod: Module, block: list[ast.stmt]) -> Iterator[Hit]:
        seen_backward = None
        cleared: tuple[ast.Call, str, ast.Call] | None = None  # zero_grad, its optimizer, the backward
        for stmt in block:
            backward = _backward_in(mod, stmt)
            if backward is not None:
                seen_backward, cleared = backward, None
                continue
            zero = _zero_grad(stmt)
            if zero is not None and seen_backward is not None:
                cleared = (*zero, seen_backward)
                continue
            if cleared is not None:
                step = _step_on(mod, stmt, cleared[1])
                if step is not None:
                    call, opt, filled = cleared
                    yield Hit(
                        call,
                        f"`{opt}.zero_grad()` (line {call.lineno}) runs between "
                        f"`{mod.text(filled)}` (line {filled.lineno}) and "
                        f"`{mod.text(step)}` (line {step.lineno}): the step finds the "
                        "gradients already cleared and updates nothing",
                        cause="Gradients are cleared after backward filled them and before the "
                        "optimizer used them; only weight decay and momentum move the weights.",
                        fix=f"Move `{opt}.zero_grad()` to the start of the iteration (before the "
                        f"forward pass) or after `{mod.text(step)}`.",
                    )
                    cleared = None


def _block_of(mod: Module, node: ast.stmt) -> list[ast.stmt] | None:
    """The statement list that holds the statement ``node``."""
    parent = mod.parent.get(node)
    for field in ("body", "orelse", "finalbody"):
        stmts = getattr(parent, field, None)
        if isinstance(stmts, list) and any(s is node for s in stmts):
            return stmts
    return None


def _backward_in(mod: Module, stmt: ast.stmt) -> ast.Call | None:
    """The first backward call inside ``stmt`` (by line range, against the scope's list)."""
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    for b in mod.scope(stmt).backwards:
        if first <= b.call.lineno <= last:
            return b.call
    return None


def _zero_grad(stmt: ast.stmt) -> tuple[ast.Call, str] | None:
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        receiver = dotted(method(stmt.value, "zero_grad"))
        if receiver:
            return stmt.value, receiver
    return None


def _step_on(mod: Module, stmt: ast.stmt, opt: str) -> ast.Call | None:
    for n in ast.walk(stmt):
        if not isinstance(n, ast.Call):  # what method() would find no receiver in
            continue
        receiver = dotted(method(n, "step"))
        if receiver is None:
            continue
        if receiver == opt and mod.role(opt) == "optimizer":
            return n
        if mod.role(receiver) == "scaler" and n.args and dotted(n.args[0]) == opt:
            return n
    return None
