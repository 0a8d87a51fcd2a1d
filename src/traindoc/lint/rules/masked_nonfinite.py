"""masked-nonfinite: a guard replaces a NaN/Inf loss, or swallows the error, and training goes on."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import (
    Module,
    Scope,
    dotted,
    is_constant_value,
    method,
    names_in,
    nonfinite_checked,
)
from traindoc.lint.rules._common import Hit, Invalid

BROAD = frozenset(
    {"Exception", "BaseException", "RuntimeError", "ValueError", "FloatingPointError", "ArithmeticError"}
)


class MaskedNonfinite:
    """The loss (or a trained model's output) is made finite by force, or the error it causes
    is swallowed: ``if torch.isnan(loss): loss = <constant>``, ``torch.nan_to_num(loss)``,
    ``torch.where(torch.isnan(loss), 0, loss)``, or a ``try``/``except`` around backward that
    catches a broad error and neither re-raises nor reports the traceback; or a ``continue``
    after backward on a non-finite loss that skips the iteration's ``zero_grad()`` (its NaN
    gradients stay in ``.grad`` and join the next batch's). The loss is followed through aliases
    and accumulations (``l = loss``, ``total = total + l``). Skipping the step explicitly
    (``continue`` before backward, or after clearing the gradients) or raising is fine and stays
    quiet.
    """

    id: ClassVar[str] = "masked-nonfinite"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch

            def train_step(model, batch, optimizer):
                loss = model(batch).mean()
                if torch.isnan(loss):
                    loss = torch.tensor(1.0, requires_grad=True)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            6,
        ),
        Invalid(
            """
            import torch

            for x, y in loader:
                loss = criterion(model(x), y)
                loss = torch.nan_to_num(loss, nan=0.0)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            5,
        ),
        Invalid(
            """
            import torch

            for x, y in loader:
                loss = criterion(model(x), y)
                loss = torch.where(torch.isfinite(loss), loss, torch.zeros_like(loss))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            5,
        ),
        Invalid(
            """
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                try:
                    loss.backward()
                except RuntimeError:
                    print("backward failed, skipping batch")
                    continue
                optimizer.step()
            """,
            6,
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            def compute_loss(pred, target):
                loss = F.mse_loss(pred, target)
                if torch.isnan(loss) or torch.isinf(loss):
                    loss = 1.0
                return loss
            """,
            7,
        ),
        Invalid(
            """
            import torch

            FALLBACK = 10.0
            for x, y in loader:
                loss = criterion(model(x), y)
                if not torch.isfinite(loss):
                    loss = loss.new_tensor(FALLBACK)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            7,
        ),
        Invalid(
            """
            import torch

            def training_step(model, batch):
                loss = model(**batch).loss
                bad = ~torch.isfinite(loss)
                loss = torch.where(bad, torch.zeros_like(loss), loss)
                return loss
            """,
            6,
        ),
        Invalid(
            """
            import math

            for step in range(max_steps):
                optimizer.zero_grad(set_to_none=True)
                total = 0.0
                for micro in range(grad_accum):
                    l = model(next(batches)) / grad_accum
                    if math.isnan(l.item()):
                        l = l * 0
                    total = total + l
                total.backward()
                optimizer.step()
            """,
            9,
        ),
        Invalid(
            """
            import torch

            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                if not torch.isfinite(loss):
                    print("skipping a non-finite batch")
                    continue
                optimizer.step()
                optimizer.zero_grad()
            """,
            8,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch

        for x, y in loader:
            loss = criterion(model(x), y)
            if torch.isnan(loss):
                raise FloatingPointError(f"loss is NaN at batch {x.shape}")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        """
        import torch

        skipped = 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            if not torch.isfinite(loss):
                skipped += 1
                continue
            loss.backward()
            optimizer.step()
        """,
        """
        import torch

        @torch.no_grad()
        def evaluate(model, loader):
            model.eval()
            total = 0.0
            for x, y in loader:
                val_loss = criterion(model(x), y)
                total += torch.nan_to_num(val_loss).item()
            return total
        """,
        """
        for x, y in loader:
            optimizer.zero_grad()
            y = torch.nan_to_num(y)  # NaN marks a missing label in this dataset
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        """,
        """
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            try:
                loss.backward()
            except RuntimeError as e:
                if "out of memory" not in str(e):
                    raise
                torch.cuda.empty_cache()
                continue
            optimizer.step()
        """,
        # a profiler times forward and backward of each layer; nothing is trained
        """
        import time

        def time_layers(layers, x, repeats=10):
            timings = {}
            for name, layer in layers.items():
                start = time.perf_counter()
                try:
                    for _ in range(repeats):
                        layer(x).float().sum().backward()
                    timings[name] = (time.perf_counter() - start) / repeats
                except Exception:
                    timings[name] = float("nan")  # this layer has nothing to differentiate
            return timings
        """,
        """
        import torch

        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            if not torch.isfinite(loss):
                optimizer.zero_grad(set_to_none=True)
                continue
            optimizer.step()
            optimizer.zero_grad()
        """,
        """
        import torch

        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            if not torch.isfinite(loss):
                continue
            optimizer.step()
        """,
        """
        import torch

        running_loss = 0.0
        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            l = loss.detach()
            if torch.isnan(l):
                l = torch.zeros(())
            running_loss = running_loss + l
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        models = mod.trained_models()
        for scope in mod.scopes:
            if scope.is_eval:
                continue
            losses = mod.loss_names(scope)
            outputs = {
                t for t, _, v in scope.assigns if isinstance(v, ast.Call) and dotted(v.func) in models
            }
            if losses:
                yield from self._replaced(mod, scope, losses)
            if losses or outputs:
                yield from self._filtered(mod, scope, losses | outputs)
            yield from self._swallowed(mod, scope)
            if losses:
                yield from self._skipped_with_grads(mod, scope, losses)

    def _replaced(self, mod: Module, scope: Scope, losses: set[str]) -> Iterator[Hit]:
        for branch in scope.ifs:
            checked = nonfinite_checked(mod, branch.test) & losses
            if not checked or mod.grad_mode(branch):
                continue
            for stmt in branch.body + branch.orelse:
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                    continue
                name = dotted(stmt.targets[0])
                if name in checked and is_constant_value(mod, stmt.value):
                    yield Hit(
                        stmt,
                        f"`{name}` is replaced by `{mod.text(stmt.value)}` when "
                        f"`{mod.text(branch.test)}` (line {branch.lineno}): the step trains on a "
                        "constant and the NaN/Inf that caused it is hidden",
                        cause="A NaN guard turns a failing step into a silent no-op: the constant "
                        "has zero gradient, so those batches teach nothing and the numerical bug "
                        "behind the NaN is never found.",
                        fix=f"Delete the replacement `{name} = {mod.text(stmt.value)}`; let the "
                        "NaN surface (or skip the batch explicitly with `continue` and count the "
                        "skips), then fix its source.",
                    )

    def _filtered(self, mod: Module, scope: Scope, names: set[str]) -> Iterator[Hit]:
        for target, stmt, value in scope.assigns:
            if target not in names or isinstance(stmt, ast.AugAssign) or mod.grad_mode(stmt):
                continue
            how = None
            for call in ast.walk(value):
                if isinstance(call, ast.Call) and (call.args or method(call, "nan_to_num") is not None):
                    found = self._filter(mod, call)  # x.nan_to_num(nan=0.0): keywords only
                    if found and names_in(call) & names:
                        how = found
                        break
            if how:
                yield Hit(
                    stmt,
                    f"`{target} = {mod.text(value)}` replaces NaN/Inf in `{target}` before "
                    f"backward: the non-finite values are hidden and their batches train on "
                    "nothing",
                    cause=f"`{how}` makes the value finite by force; the model's NaN/Inf is "
                    "never reported and the replaced entries carry no gradient.",
                    fix=f"Remove the `{how}` call on `{target}` and find where the NaN/Inf comes "
                    "from (`traindoc run` names the first module that produced it).",
                )
        for call in mod.named_in(scope, "nan_to_num_"):
            receiver = method(call, "nan_to_num_")
            if receiver is None and mod.callee(call) == "torch.nan_to_num_" and call.args:
                receiver = call.args[0]
            name = dotted(receiver)
            if name in names and not mod.grad_mode(call):
                yield Hit(
                    call,
                    f"`{mod.text(call)}` replaces NaN/Inf in `{name}` in place before backward: "
                    "the non-finite values are hidden and their batches train on nothing",
                    cause="`nan_to_num_` makes the value finite by force; the model's NaN/Inf is "
                    "never reported.",
                    fix=f"Remove `{mod.text(call)}` and find where the NaN/Inf comes from.",
                )

    def _filter(self, mod: Module, value: ast.Call) -> str | None:
        q = mod.callee(value)
        if q == "torch.nan_to_num" or method(value, "nan_to_num") is not None:
            return "nan_to_num"
        if (q == "torch.where" or method(value, "masked_fill") is not None) and value.args:
            test: ast.AST | None = value.args[0]
            if isinstance(test, ast.Name):  # bad = ~torch.isfinite(loss); torch.where(bad, ...)
                test = mod.scope(value).reaching(test.id, value.lineno)
            if test is not None and nonfinite_checked(mod, test):
                return "torch.where" if q == "torch.where" else "masked_fill"
        return None

    def _skipped_with_grads(self, mod: Module, scope: Scope, losses: set[str]) -> Iterator[Hit]:
        """``continue`` under a NaN test of the loss, after its backward, while this iteration
        clears gradients only after that point: the NaN gradients are added to the next batch's."""
        for branch in scope.ifs:
            skip = next((s for s in branch.body if isinstance(s, ast.Continue)), None)
            if skip is None or not nonfinite_checked(mod, branch.test) & losses:
                continue
            loop = next(iter(mod.loops_around(branch)), None)
            if loop is None or _clears(mod, scope, branch, branch.lineno, skip.lineno):
                continue
            done = [(site, b) for site, b in mod.backwards_in(scope, loop) if site.lineno < branch.lineno]
            if not done or _clears(mod, scope, loop, loop.lineno, done[0][0].lineno):
                continue  # no backward before the test, or the next pass clears before its own
            b = done[-1][1]
            yield Hit(
                skip,
                f"`continue` (line {skip.lineno}) skips this batch when `{mod.text(branch.test)}` "
                f"(line {branch.lineno}), after `{b.text()}` (line {b.call.lineno}) and before "
                "any `zero_grad()`: its NaN/Inf gradients stay in `.grad` and are added to the "
                "next batch's, so the next step applies them",
                cause="The skip avoids the optimizer step but not the gradients already "
                "accumulated; the loop clears gradients only after the point it skips to.",
                fix="Clear the gradients before skipping (`optimizer.zero_grad(set_to_none=True)` "
                "then `continue`), or check the loss before backward, or move `zero_grad()` to "
                "the top of the loop.",
            )

    def _swallowed(self, mod: Module, scope: Scope) -> Iterator[Hit]:
        for block in scope.trys:
            if not block.body:
                continue
            first, last = block.body[0].lineno, block.body[-1].end_lineno or block.body[-1].lineno
            inside = [b for b in scope.backwards if first <= b.call.lineno <= last]
            if not inside or not _trains(mod, scope):
                continue
            for handler in block.handlers:
                caught = _broad(handler.type)
                if caught is None or _reraises(handler) or _about_oom(handler) or _reports(handler):
                    continue
                b = inside[0]
                label = f"except {caught}" if caught else "except"
                yield Hit(
                    handler,
                    f"`{label}` around `{b.text()}` (line {b.call.lineno}) swallows the "
                    "error and training goes on: a NaN/Inf that makes backward fail (anomaly "
                    "detection, a NaN-check hook) is hidden and the step is silently dropped",
                    cause="A broad except around backward turns a failing step into a skipped "
                    "one without a trace; the numerical failure behind it is never seen.",
                    fix="Let the error propagate, or catch only the error you expect and "
                    "re-raise everything else (`except SomeError as e: ... raise`); if bad "
                    "batches must be skipped, count them and stop past a small share.",
                )


def _trains(mod: Module, scope: Scope) -> bool:
    """The gradients of a backward in ``scope`` reach an optimizer step: one in ``scope`` (or
    what it calls), in a function of this file that calls it, or in a method of its class. A
    backward timed by a profiler or run for a gradient check trains nothing."""
    if mod.steps_in(scope) or any(mod.steps_in(mod.scope(c)) for c in mod.callers_of(scope)):
        return True
    return scope.cls is not None and any(s.cls == scope.cls and mod.steps_in(s) for s in mod.scopes)


def _clears(mod: Module, scope: Scope, node: ast.AST, start: int, end: int) -> bool:
    """Gradients are cleared inside ``node`` between lines ``start`` and ``end`` (there, or in a
    function of this file called there)."""
    for call in mod.calls_in(scope, node):
        if not start <= call.lineno <= end:
            continue
        target = mod.callee_scope(call)
        reached = mod.reached(target) if target is not None else []
        if any("zero_grad" in (dotted(c.func) or "") for c in [call, *(c for s in reached for c in s.calls)]):
            return True
    return any(
        start <= stmt.lineno <= end and t.endswith(".grad") and mod.inside(stmt, node)
        for t, stmt, _ in scope.assigns
    )


def _broad(node: ast.expr | None) -> str | None:
    if node is None:
        return ""
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    for item in items:
        text = dotted(item) or ""
        if text.split(".")[-1] in BROAD:
            return ast.unparse(node)
    return None


def _reraises(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(n, ast.Raise) for n in ast.walk(handler))


def _reports(handler: ast.ExceptHandler) -> bool:
    """The handler prints the traceback (``logger.exception``, ``traceback.print_exc``): the
    error is reported, not hidden."""
    for n in ast.walk(handler):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if n.func.attr in ("exception", "print_exc", "print_exception", "format_exc"):
                return True
            if n.func.attr in ("error", "warning", "critical") and any(
                kw.arg == "exc_info" for kw in n.keywords
            ):
                return True
    return False


def _about_oom(handler: ast.ExceptHandler) -> bool:
    for n in ast.walk(handler):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            low = n.value.lower()
            if "out of memory" in low or "oom" in low:
                return True
        if isinstance(n, (ast.Name, ast.Attribute)) and "OutOfMemory" in (dotted(n) or ""):
            return True
    return False
