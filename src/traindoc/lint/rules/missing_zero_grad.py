"""missing-zero-grad: a training loop steps the optimizer but nothing ever clears gradients."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, method
from traindoc.lint.rules._common import Hit, Invalid
from traindoc.lint.rules._handed_over import clears_model, handed_over


class MissingZeroGrad:
    """A loop calls backward and ``optimizer.step()`` (directly, or in functions and methods of
    this file it calls) while no path through the loop clears gradients: no ``zero_grad()`` on
    any object, no ``p.grad = None``, no ``p.grad.zero_()``, there or in what it calls. Each step
    then adds this batch's gradient to every previous one. Quiet when the only clearing sits in
    a function this file never calls itself (a hook or closure something else may run), for
    engines that clear gradients themselves (``engine.backward(loss); engine.step()`` in
    DeepSpeed; ``accelerator.backward`` and ``fabric.backward`` clear nothing, so they count),
    for RPC training (``dist_autograd.backward(ctx, ...)``: every context starts with fresh
    gradients), and for a micro-batch loop whose function clears gradients after it.

    Gradients handed over from another model (``for g, l in zip(shared.parameters(),
    local.parameters()): g._grad = l.grad``, A3C; ``m.grad = w.grad.float()``, a half-precision
    working copy) are that model's to clear: the optimizer's ``zero_grad()`` clears only the
    parameters it holds (since torch 2.0 it sets them to None, so a shared tensor is not zeroed
    in place either). The loop then needs ``local.zero_grad()``, ``l.grad = None`` or the
    model built afresh; ``zero_grad(set_to_none=False)`` counts when the tensor itself is shared.
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
        Invalid(
            """
            import torch

            class Trainer:
                def __init__(self, model, loader):
                    self.model, self.loader = model, loader
                    self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

                def _step(self, x, y):
                    loss = torch.nn.functional.mse_loss(self.model(x), y)
                    loss.backward()
                    self.optimizer.step()

                def fit(self, epochs):
                    self.optimizer.zero_grad()
                    for _ in range(epochs):
                        for x, y in self.loader:
                            self._step(x, y)
            """,
            11,
        ),
        Invalid(
            """
            import torch

            def train_step(model, batch, opt):
                loss = model(*batch)
                loss.backward()
                opt.step()
                return loss.item()

            opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
            opt.zero_grad(set_to_none=True)
            for epoch in range(epochs):
                for batch in loader:
                    train_step(model, batch, opt)
            """,
            6,
        ),
        Invalid(
            """
            for epoch in range(epochs):
                optimizer.zero_grad()
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
            """,
            6,
        ),
        Invalid(
            """
            import torch.optim as optim

            def train(global_model, rank):
                local_model = ActorCritic()
                optimizer = optim.Adam(global_model.parameters(), lr=2e-4)
                for episode in range(300):
                    loss = local_model.loss(rollout(local_model))
                    optimizer.zero_grad()
                    loss.backward()
                    for global_param, local_param in zip(global_model.parameters(), local_model.parameters()):
                        global_param._grad = local_param.grad
                    optimizer.step()
                    local_model.load_state_dict(global_model.state_dict())
            """,
            12,
        ),
        Invalid(
            """
            def worker(shared, local, opt, rollouts):
                shared_params = dict(shared.named_parameters())
                for rollout in rollouts:
                    local.load_state_dict(shared.state_dict())
                    local.loss(rollout).backward()
                    for name, p in local.named_parameters():
                        shared_params[name].grad = p.grad.clone()
                    opt.step()
                    opt.zero_grad()
            """,
            8,
        ),
        Invalid(
            """
            import copy
            import torch

            class HalfPrecisionTrainer:
                def __init__(self, model):
                    self.master = model.float()
                    self.work = copy.deepcopy(model).half()
                    self.opt = torch.optim.AdamW(self.master.parameters(), lr=1e-4)

                def _copy_grads(self):
                    for m, w in zip(self.master.parameters(), self.work.parameters()):
                        m.grad = w.grad.float()

                def fit(self, loader):
                    for x, y in loader:
                        loss = torch.nn.functional.cross_entropy(self.work(x.half()), y)
                        loss.backward()
                        self._copy_grads()
                        self.opt.step()
                        self.opt.zero_grad()
            """,
            19,
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
        """
        import torch.distributed.autograd as dist_autograd
        from torch.distributed.optim import DistributedOptimizer

        opt = DistributedOptimizer(torch.optim.SGD, model.parameter_rrefs(), lr=0.05)
        for data, target in loader:
            with dist_autograd.context() as context_id:
                loss = criterion(model(data), target)
                dist_autograd.backward(context_id, [loss])
                opt.step(context_id)
        """,
        """
        class Trainer:
            def fit(self):
                for i, batch in enumerate(self.loader):
                    loss = self.model(batch).mean() / self.accum
                    loss.backward()
                    if (i + 1) % self.accum == 0:
                        self._optimizer_step()

            def _optimizer_step(self):
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
        """,
        """
        for step in range(max_steps):
            for micro in range(grad_accum):
                loss = model(next(batches)) / grad_accum
                loss.backward()
                if micro == grad_accum - 1:
                    optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        """,
        """
        for episode in range(300):
            loss = local_model.loss(rollout(local_model))
            optimizer.zero_grad()
            local_model.zero_grad()
            loss.backward()
            for global_param, local_param in zip(global_model.parameters(), local_model.parameters()):
                global_param._grad = local_param.grad
            optimizer.step()
        """,
        """
        shared_params = dict(shared.named_parameters())
        for rollout in rollouts:
            local.load_state_dict(shared.state_dict())
            local.zero_grad(set_to_none=True)
            local.loss(rollout).backward()
            for name, p in local.named_parameters():
                shared_params[name].grad = p.grad
            opt.step()
        """,
        """
        for x, y in loader:
            loss = criterion(work(x.half()), y)
            loss.backward()
            for m, w in zip(master.parameters(), work.parameters()):
                m.grad = w.grad.float()
                w.grad = None
            opt.step()
            opt.zero_grad()
        """,
        """
        for x, y in loader:
            loss = criterion(work(x.half()), y)
            loss.backward()
            for m, w in zip(master.parameters(), work.parameters()):
                m.grad.copy_(w.grad)
            opt.step()
            work.zero_grad()
        """,
        """
        for step in range(steps):
            optimizer.zero_grad(set_to_none=False)
            loss = worker_loss(local)
            loss.backward()
            for g, l in zip(shared.parameters(), local.parameters()):
                g._grad = l.grad
            optimizer.step()
        """,
        """
        class Trainer(BaseTrainer):
            def on_train_batch_start(self):
                self.optimizer.zero_grad()

            def train_loop(self):
                for batch in self.loader:
                    self.call_hook("on_train_batch_start")
                    loss = self.model(batch)
                    loss.backward()
                    self.optimizer.step()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        if not any(scope.backwards for scope in mod.scopes):
            return
        judged = [(scope, loop) for scope in mod.scopes for loop in _step_loops(mod, scope)]
        if not judged:
            return
        clears = _clearing_sites(mod)
        unseen = {id(s) for _, s in clears if _out_of_sight(mod, s)}
        reported: set[int] = set()
        for scope, loop in judged:
            handed = handed_over(mod, scope, loop)
            if handed:
                hit = _uncleared_hand_over(mod, scope, loop, handed)
                if hit is not None and id(hit.node) not in reported:
                    reported.add(id(hit.node))
                    yield hit
                continue
            if any(s is scope and mod.inside(n, loop) for n, s in clears) or any(
                s is helper for _, helper in mod.helpers(scope, loop) for _, s in clears
            ) or unseen - {id(scope)}:
                continue  # cleared in the loop, or maybe by something this file does not call
            if _cleared_after_micro_loop(mod, scope, loop, clears):
                continue
            site, call, opt = next(
                (s, c, o) for s, c, o in mod.steps_in(scope, loop) if not _built_inside(mod, scope, o, loop)
            )
            b_site, b = mod.backwards_in(scope, loop)[0]
            if id(call) in reported:
                continue
            reported.add(id(call))
            where = "" if site is call else f", run by `{mod.text(site)}` at line {site.lineno}"
            b_where = "" if b_site is b.call else f", run by `{mod.text(b_site)}`"
            if clears:  # name the clearing nearest to this loop
                node = min(clears, key=lambda c: (c[1] is not scope, abs(getattr(c[0], "lineno", 0) - loop.lineno)))[0]
                cleared = (f"gradients are cleared only outside this loop (`{mod.text(node, 50)}`, "
                           f"line {getattr(node, 'lineno', 0)})")
            else:
                cleared = "nothing in this file clears the gradients"
            yield Hit(
                call,
                f"`{opt}` steps (line {call.lineno}{where}) after `{b.text()}` (line "
                f"{b.call.lineno}{b_where}) in a loop, and {cleared}: "
                "every step adds this batch's gradient to all previous ones",
                cause="Without `zero_grad()` on every pass of the loop the `.grad` tensors "
                "accumulate across steps; the update grows step after step and follows old batches.",
                fix=f"Call `{opt}.zero_grad(set_to_none=True)` once per step, before the "
                "forward pass or right after the optimizer step.",
            )


def _uncleared_hand_over(mod: Module, scope: Scope, loop: ast.stmt,
                         handed: list[tuple[ast.stmt, str, str, bool]]) -> Hit | None:
    """The hit for gradients handed over in ``loop`` from a model nothing in it clears."""
    for stmt, model, var, shared in handed:
        if clears_model(mod, scope, loop, model, var, shared):
            continue
        _, call, opt = mod.steps_in(scope, loop)[0]
        return Hit(
            call,
            f"`{opt}` steps (line {call.lineno}) with gradients handed over from `{model}` "
            f"(`{mod.text(stmt, 60)}`, line {stmt.lineno}), and nothing in this loop clears "
            f"`{model}`'s gradients: every backward adds to all its previous ones",
            cause=f"`{opt}.zero_grad()` clears only the parameters it holds, not `{model}`'s, where "
            "backward() accumulates (since torch 2.0 it sets them to None, so a gradient tensor "
            "shared by assignment is not zeroed in place either). Each step applies the sum of "
            "every gradient so far.",
            fix=f"Call `{model}.zero_grad()` before each backward (or set `{var}.grad = None` "
            "once it is handed over).",
        )
    return None


def _step_loops(mod: Module, scope: Scope) -> list[ast.stmt]:
    """The loops of ``scope`` to judge: each runs a backward and an optimizer step (directly or
    in helpers) whose optimizer is not built afresh inside it. The innermost such loop when it
    steps on every pass; when its step is conditional (``if (i + 1) % accum == 0``, or the last
    micro-batch) the outermost one around it, since the clearing may follow the inner loop."""
    found = []
    for loop in scope.loops:
        backwards = mod.backwards_in(scope, loop)
        steps = [s for s, _, o in mod.steps_in(scope, loop) if not _built_inside(mod, scope, o, loop)]
        if steps and backwards and all(
            b.via in ("tensor", "scaler", "autograd")
            or (b.via == "wrapper" and mod.role(b.owner) == "accelerator")  # never clears grads
            for _, b in backwards
        ):
            found.append((loop, steps))
    judged: list[ast.stmt] = []
    for loop, steps in found:
        if any(other is not loop and mod.inside(other, loop) for other, _ in found):
            continue  # not innermost
        if not any(_every_pass(mod, site, loop) for site in steps):
            loop = next((outer for outer, _ in found if mod.inside(loop, outer)), loop)
        if all(j is not loop for j in judged):
            judged.append(loop)
    return judged


def _cleared_after_micro_loop(mod: Module, scope: Scope, loop: ast.stmt, clears: list[tuple[ast.AST, Scope]]) -> bool:
    """A micro-batch loop whose step is conditional (the last micro-batch) and whose function
    clears gradients after it: each call of the function is one update, cleared at its end."""
    if mod.micro_count(loop) is None or any(_every_pass(mod, site, loop) for site, _, _ in mod.steps_in(scope, loop)):
        return False
    end = loop.end_lineno or loop.lineno
    return any(s is scope and getattr(n, "lineno", 0) > end for n, s in clears)


def _every_pass(mod: Module, site: ast.AST, loop: ast.AST) -> bool:
    """``site`` runs on every pass of ``loop``: no ``if`` between them."""
    for a in mod.ancestors(site):
        if a is loop:
            return True
        if isinstance(a, (ast.If, ast.IfExp, ast.Match)):
            return False
    return True


def _built_inside(mod: Module, scope: Scope, opt: str, loop: ast.AST) -> bool:
    """The optimizer is built afresh inside the loop: each one steps once, nothing accumulates
    across its steps (a numerics check, not a training loop)."""
    return any(mod.inside(stmt, loop) for stmt, _ in scope.values_of(opt))


def _clearing_sites(mod: Module) -> list[tuple[ast.AST, Scope]]:
    """Every place that clears gradients, with its scope: ``zero_grad()`` on anything,
    ``p.grad.zero_()`` (and ``detach_``/``fill_``/``mul_``), ``p.grad = None``."""
    out: list[tuple[ast.AST, Scope]] = []
    for name, calls in mod.by_name.items():
        if "zero_grad" in name:
            out += [(c, mod.scope(c)) for c in calls]
    for call in mod.named("zero_", "detach_", "fill_", "mul_"):
        receiver = method(call, "zero_", "detach_", "fill_", "mul_")
        if isinstance(receiver, ast.Attribute) and receiver.attr == "data":
            receiver = receiver.value
        if isinstance(receiver, ast.Attribute) and receiver.attr == "grad":
            out.append((call, mod.scope(call)))
    for scope in mod.scopes:
        out += [(stmt, scope) for t, stmt, _ in scope.assigns if t.endswith(".grad")]
    return out


def _out_of_sight(mod: Module, scope: Scope, depth: int = 3) -> bool:
    """``scope`` may run without this file calling it: a function nothing here calls (a hook, a
    closure handed to ``optimizer.step``, a method a framework runs), or one only such
    functions call."""
    if scope is mod.scopes[0]:
        return False
    found = [mod.scope(c) for c in mod.callers_of(scope)]
    if not found:
        return True
    return depth > 0 and all(c is not scope and _out_of_sight(mod, c, depth - 1) for c in found)
