"""unscaled-grad-accumulation: accumulated backward passes whose loss is not divided by their
number, or divided twice when ``accelerator.backward`` already divides it."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import AssignValue, Backward, Module, Scope, arith_names, dotted, kwarg, method, number
from traindoc.lint.rules._common import Hit, Invalid


class UnscaledGradAccumulation:
    """Gradient accumulation with the wrong loss scale.

    Unscaled: backward runs on every batch while ``optimizer.step()`` runs only under
    ``if (i + 1) % accum_steps == 0`` (or once after a loop over micro-batches, ``for mb in
    micro_batches`` / ``for micro_step in range(accum)``), here or in a helper the loop calls,
    and the loss handed to backward is not divided by anything: the summed gradient is
    ``accum_steps`` times too large, and so is the effective LR. Any division of the loss (by the step count, by a token count) keeps the rule quiet.

    Divided twice: the ``Accelerator`` is built with ``gradient_accumulation_steps`` (then
    ``accelerator.backward`` divides the loss itself) and the loss is also divided by the
    accumulation steps before ``accelerator.backward(loss)``: the gradient is N times too small.
    """

    id: ClassVar[str] = "unscaled-grad-accumulation"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            accum_steps = 4
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                loss.backward()
                if (i + 1) % accum_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            4,
        ),
        Invalid(
            """
            for step, batch in enumerate(loader):
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = model(**batch).loss
                scaler.scale(loss).backward()
                if step % args.gradient_accumulation_steps == 0:
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
            """,
            4,
        ),
        Invalid(
            """
            from accelerate import Accelerator

            accelerator = Accelerator(gradient_accumulation_steps=args.grad_accum)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for batch in loader:
                with accelerator.accumulate(model):
                    loss = model(**batch).loss
                    loss = loss / args.grad_accum
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            8,
        ),
        Invalid(
            """
            def accumulate_and_step(model, opt, scaler, micro_batches):
                for mb in micro_batches:
                    with torch.autocast("cuda", dtype=torch.float16):
                        loss = model(mb)
                    scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
            """,
            5,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            loss = loss / accum_steps
            loss.backward()
            if (i + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        """,
        """
        for step, batch in enumerate(loader):
            logits = model(batch["input_ids"])
            loss_sum = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), reduction="sum")
            (loss_sum / tokens_per_optimizer_step).backward()
            if (step + 1) % micro_batches == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        """,
        """
        from accelerate import Accelerator

        accelerator = Accelerator(gradient_accumulation_steps=8)
        for batch in loader:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        """,
        """
        from accelerate import Accelerator

        accelerator = Accelerator()
        for step, batch in enumerate(loader):
            loss = model(**batch).loss / gradient_accumulation_steps
            accelerator.backward(loss)
            if step % gradient_accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        """,
        """
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
            if step % log_every == 0:
                print(step)
        """,
        """
        def accumulate_and_step(model, opt, micro_batches):
            for mb in micro_batches:
                loss = model(mb) / len(micro_batches)
                loss.backward()
            opt.step()
            opt.zero_grad()
        """,
        """
        for i, (x, y) in enumerate(loader):
            criterion(model(x), y).backward()
            if (i + 1) % accum == 0:
                for p in model.parameters():
                    p.grad /= accum
                optimizer.step()
                optimizer.zero_grad()
        """,
        # delayed policy update: the value net steps every batch, the policy every 2nd one on
        # gradients its own block computes after clearing them
        """
        for it, batch in enumerate(buffer):
            td_error = value_net(batch.obs, batch.act) - batch.target
            critic_loss = td_error.pow(2).mean()
            value_optimizer.zero_grad()
            critic_loss.backward()
            value_optimizer.step()
            if it % 2 == 0:
                actor_loss = -value_net(batch.obs, policy(batch.obs)).mean()
                policy_optimizer.zero_grad()
                actor_loss.backward()
                policy_optimizer.step()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        divisor = _accelerator_divisor(mod)
        reported: set[int] = set()
        for scope in mod.scopes:
            if not scope.backwards and not mod.helpers(scope):
                continue
            # the backward passes of this scope and of the helpers it calls, each with the call
            # in this scope that runs it: the loop and the step may live in either
            for site, b in mod.backwards_in(scope):
                if id(b.call) in reported:
                    continue
                if b.via in ("tensor", "scaler", "autograd"):
                    hits = list(self._unscaled(mod, scope, site, b))
                elif divisor is not None and site is b.call and _is_accelerate(mod, b.owner):
                    hits = list(self._divided_twice(mod, scope, b, divisor))
                else:
                    continue
                if hits:
                    reported.add(id(b.call))
                    yield from hits

    def _unscaled(self, mod: Module, scope: Scope, site: ast.Call, b: Backward) -> Iterator[Hit]:
        loops = mod.loops_around(site)
        if not loops:
            return
        loop = loops[0]
        outer = {id(a) for a in loops[1:]}
        home = mod.scope(b.call)  # where the loss is computed (this scope or a helper)
        for step_site, call, opt in mod.steps_in(scope):
            if mod.inside(step_site, loop):
                # steps inside the loop: accumulation only under ``if (i + 1) % N == 0``
                if (call.lineno <= b.call.lineno) if step_site is site else (step_site.lineno <= site.lineno):
                    continue
                guard = _modulo_guard(mod, step_site, loop)
                if guard is None and call is not step_site:
                    guard = _modulo_guard(mod, call, None)  # the guard inside the helper that steps
                if guard is None or mod.inside(site, guard[0]) or mod.inside(b.call, guard[0]):
                    continue
                if _cleared_before(mod, guard[0], call, opt):
                    continue  # the guarded step sees only what its own block computes (TD3's actor)
                every = guard[1]
                shown = f"once every `{every}` batches (`{mod.text(guard[0].test)}`, line {guard[0].lineno})"
                if _scales_grads(guard[0]):
                    return
            else:
                # a step after a micro-batch loop: ``for mb in micro_batches: backward``, then step
                end = loop.end_lineno or loop.lineno
                if step_site.lineno <= end or not {id(a) for a in mod.loops_around(step_site)} <= outer:
                    continue
                count = mod.micro_count(loop)
                if count is None or _scales_grads(loop) or _grads_scaled_between(mod, scope, loop, step_site):
                    continue
                every = count
                shown = f"once after the loop over `{mod.text(getattr(loop, 'iter', loop), 40)}` (line {loop.lineno})"
            if _is_scaled(mod, home, b, every):
                return
            name = mod.text(b.loss)
            yield Hit(
                b.call,
                f"`{b.text()}` (line {b.call.lineno}) runs on every batch while `{opt}` steps "
                f"{shown}, and `{name}` is not divided by `{every}`: the accumulated "
                f"gradient is `{every}` times larger, and so is the effective LR",
                cause="Gradients of accumulated backward passes add up; without dividing each "
                "loss by the number of passes the update is that many times too large.",
                fix=f"Divide the loss before backward: `{name} = {name} / {every}`, or "
                "normalize by the number of tokens/samples in the whole accumulated batch.",
            )
            return

    def _divided_twice(
        self, mod: Module, scope: Scope, b: Backward, divisor: tuple[ast.Call, str]
    ) -> Iterator[Hit]:
        ctor, steps_text = divisor
        for node, by in _divisions(scope, b):
            text = mod.text(by)
            if text == steps_text or "accum" in text.lower():
                yield Hit(
                    node,
                    f"`{mod.text(b.loss)}` is divided by `{text}` (line {node.lineno}) and "
                    f"`{b.text()}` divides it again, because the `Accelerator` was built with "
                    f"`gradient_accumulation_steps={steps_text}` (line {ctor.lineno}): the "
                    "gradient is that many times too small",
                    cause="`accelerator.backward` already divides the loss by "
                    "`gradient_accumulation_steps`; dividing it by hand as well scales the "
                    "effective LR down by the same factor.",
                    fix=f"Remove the division by `{text}` and hand the plain loss to "
                    f"`{b.owner}.backward`.",
                )
                return


def _cleared_before(mod: Module, block: ast.AST, step: ast.Call, opt: str) -> bool:
    """``block`` clears the gradients ``opt`` steps on (``opt.zero_grad()``, or a module's
    ``zero_grad()``) before ``step``: nothing from earlier backward passes reaches the step."""
    for call in mod.calls_in(mod.scope(block), block):
        receiver = dotted(method(call, "zero_grad"))
        if receiver is None or (call.lineno, call.col_offset) >= (step.lineno, step.col_offset):
            continue
        if receiver == opt or mod.role(receiver) != "optimizer":
            return True
    return False


def _is_accelerate(mod: Module, owner: str | None) -> bool:
    """``owner.backward(loss)`` is Accelerate's (Fabric's backward does not divide)."""
    return bool(owner) and mod.role(owner) == "accelerator" and "fabric" not in (owner or "")


def _grads_scaled_between(mod: Module, scope: Scope, loop: ast.AST, step: ast.Call) -> bool:
    """The gradients are divided between the micro-batch loop and the step."""
    end = getattr(loop, "end_lineno", 0) or 0
    for stmt in ast.walk(scope.node):
        if isinstance(stmt, ast.stmt) and end < stmt.lineno < step.lineno and _scales_grads(stmt):
            return True
    return False


def _modulo_guard(mod: Module, call: ast.Call, loop: ast.AST | None) -> tuple[ast.If, str] | None:
    """The ``if ... % N == 0`` around ``call`` inside ``loop`` (None: inside its function),
    with N as text."""
    for a in mod.ancestors(call):
        if a is loop:
            return None
        if isinstance(a, ast.If):
            for n in ast.walk(a.test):
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                    value = number(n.right)
                    if value is None or value > 1:
                        return a, mod.text(n.right)
    return None


def _scales_grads(guard: ast.AST) -> bool:
    """The guarded block divides the gradients themselves (``p.grad /= n``,
    ``p.grad.div_(n)``) before stepping: scaling the loss is then not needed."""
    for n in ast.walk(guard):
        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)):
            if "grad" in (dotted(n.target) or ""):
                return True
        receiver = method(n, "div_", "mul_")
        if receiver is not None and "grad" in (dotted(receiver) or ""):
            return True
    return False


def _is_scaled(mod: Module, scope: Scope, b: Backward, every: str) -> bool:
    """The loss (or something it is built from, through simple assignments) is divided or
    scaled, or its computation mentions the accumulation count."""
    todo: list[AssignValue] = [b.loss]
    names: set[str] = set()
    while todo:
        expr = todo.pop()
        for n in ast.walk(expr):
            if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv, ast.Mult)):
                if number(n.right) != 1 and number(n.left) != 1:
                    return True
            if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)):
                return True
            text = dotted(n) if isinstance(n, (ast.Name, ast.Attribute)) else None
            if text and (text == every or "accum" in text.lower()):
                return True
        for name in arith_names(expr) - names:
            names.add(name)
            todo += [v for _, v in scope.values_of(name)]
    return False


def _divisions(scope: Scope, b: Backward) -> Iterator[tuple[ast.stmt | ast.expr, ast.expr]]:
    """(where, divisor) for each division of the loss handed to ``b``."""
    if isinstance(b.loss, ast.BinOp) and isinstance(b.loss.op, ast.Div):
        yield b.call, b.loss.right
    for name in arith_names(b.loss):
        for stmt, value in scope.values_of(name, b.call.lineno):
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Div):
                yield stmt, stmt.value
            elif isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div):
                yield stmt, value.right


def _accelerator_divisor(mod: Module) -> tuple[ast.Call, str] | None:
    for call in mod.named("Accelerator"):
        if mod.callee(call).split(".")[-1] != "Accelerator":
            continue
        steps = kwarg(call, "gradient_accumulation_steps")
        if steps is not None and number(steps) != 1:
            return call, mod.text(steps)
    return None
