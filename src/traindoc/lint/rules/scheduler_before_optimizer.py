"""scheduler-before-optimizer: ``scheduler.step()`` runs before the first ``optimizer.step()``."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import LOOP_TYPES, Module, Scope, dotted, method
from traindoc.lint.rules._common import Hit, Invalid


class SchedulerBeforeOptimizer:
    """``scheduler.step()`` (no arguments) comes before ``optimizer.step()`` in the same loop
    iteration (e.g. at the top of the epoch loop; either step written there or in a function or
    method of this file the loop calls, the scheduler's outside any branch of it), or is called right after the scheduler is
    built, outside any loop ("pre-stepping", seed 004). The first value of the schedule is then
    skipped: a OneCycleLR starts near twice its initial LR. Quiet when the call sits in a
    branch the optimizer step is not in (a warmup guard), and for resume fast-forward loops.
    """

    id: ClassVar[str] = "scheduler-before-optimizer"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
            for epoch in range(90):
                scheduler.step()
                for x, y in loader:
                    optimizer.zero_grad()
                    criterion(model(x), y).backward()
                    optimizer.step()
            """,
            6,
        ),
        Invalid(
            """
            from torch.optim.lr_scheduler import OneCycleLR

            class Trainer:
                def setup(self, max_lr, total_steps):
                    self.scheduler = OneCycleLR(self.optimizer, max_lr=max_lr, total_steps=total_steps)
                    self.scheduler.step()  # pre-step to avoid the PyTorch warning
                    for group in self.optimizer.param_groups:
                        group["lr"] = max_lr / 25
            """,
            6,
        ),
        Invalid(
            """
            import torch

            class Trainer:
                def __init__(self, model, loader, epochs):
                    self.model, self.loader, self.epochs = model, loader, epochs
                    self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=30)

                def _train_epoch(self):
                    for x, y in self.loader:
                        self.optimizer.zero_grad()
                        self.loss_fn(self.model(x), y).backward()
                        self.optimizer.step()

                def fit(self):
                    for epoch in range(self.epochs):
                        self.scheduler.step()
                        self._train_epoch()
            """,
            17,
        ),
        Invalid(
            """
            from torch.optim.lr_scheduler import CosineAnnealingLR

            def train_one_epoch(model, loader, opt):
                for batch in loader:
                    opt.zero_grad()
                    model(batch).loss.backward()
                    opt.step()

            sched = CosineAnnealingLR(opt, T_max=epochs)
            for epoch in range(epochs):
                sched.step()
                train_one_epoch(model, loader, opt)
            """,
            11,
        ),
        Invalid(
            """
            class Trainer:
                def _on_epoch_start(self, epoch):
                    self.scheduler.step()
                    print(f"epoch {epoch}: lr {self.scheduler.get_last_lr()[0]:.2e}")

                def _train_epoch(self):
                    for x, y in self.loader:
                        self.optimizer.zero_grad()
                        loss = self.loss_fn(self.model(x), y)
                        loss.backward()
                        self.optimizer.step()

                def fit(self, epochs):
                    for epoch in range(epochs):
                        self._on_epoch_start(epoch)
                        self._train_epoch()
            """,
            15,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch

        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.8, total_steps=10000)
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
            scheduler.step()
        """,
        """
        def fit(model, optimizer, scheduler, loader, epochs):
            for epoch in range(epochs):
                train_one_epoch(model, optimizer, loader)
                val_loss = evaluate(model)
                scheduler.step(val_loss)
        """,
        """
        import torch

        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
        for _ in range(start_epoch):
            scheduler.step()  # fast-forward the schedule on resume
        for epoch in range(start_epoch, 100):
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            scheduler.step()
        """,
        """
        for step, (x, y) in enumerate(loader):
            if step >= warmup_steps:
                scheduler.step()
            else:
                set_warmup_lr(optimizer, step)
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        """,
        """
        import torch

        class Trainer:
            def _train_epoch(self):
                for x, y in self.loader:
                    self.optimizer.zero_grad()
                    self.loss_fn(self.model(x), y).backward()
                    self.optimizer.step()

            def _evaluate(self):
                self.model.eval()
                with torch.no_grad():
                    return sum(self.loss_fn(self.model(x), y).item() for x, y in self.val_loader)

            def fit(self):
                for epoch in range(self.epochs):
                    self._train_epoch()
                    self.scheduler.step()
                    self._evaluate()
        """,
        """
        class Trainer:
            def _on_epoch_start(self, epoch):
                if epoch >= self.warmup_epochs:
                    self.scheduler.step()
                else:
                    self._set_warmup_lr(epoch)

            def _train_epoch(self):
                for x, y in self.loader:
                    self.optimizer.zero_grad()
                    loss = self.loss_fn(self.model(x), y)
                    loss.backward()
                    self.optimizer.step()

            def fit(self, epochs):
                for epoch in range(epochs):
                    self._on_epoch_start(epoch)
                    self._train_epoch()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        for scope in mod.scopes:
            # (where the scheduler step runs from in this scope, the step call, the scheduler)
            scheduled = [(c, c, r) for c, r in _scheduler_steps(mod, scope)]
            for site, helper in mod.helpers(scope):
                scheduled += [
                    (site, c, r) for c, r in _scheduler_steps(mod, helper) if not _conditional(mod, c)
                ]
            if not scheduled:
                continue
            # (where the step runs from in this scope, the step call, the optimizer's name)
            steps = mod.steps_in(scope)
            first_opt = min((site.lineno for site, _, _ in steps), default=None)
            for at, call, receiver in scheduled:
                if first_opt is not None and first_opt < at.lineno:
                    continue
                later = [(site, c, o) for site, c, o in steps if self._same_iteration(mod, at, site)]
                if later:
                    site, opt_call, opt = later[0]
                    where = f"line {opt_call.lineno}" + (
                        "" if site is opt_call else f", run by `{mod.text(site)}` at line {site.lineno}"
                    )
                    sched = f"line {call.lineno}" + (
                        "" if at is call else f", run by `{mod.text(at)}` at line {at.lineno}"
                    )
                    yield Hit(
                        at,
                        f"`{receiver}.step()` ({sched}) runs before `{opt}.step()` "
                        f"({where}) in the same loop: the first value of the "
                        "schedule is skipped and every LR after it comes one step early",
                        cause="The scheduler advances before the optimizer has taken a step "
                        "(PyTorch warns about this order); a OneCycleLR then starts near twice "
                        "its initial LR.",
                        fix=f"Call `{receiver}.step()` after `{opt}.step()` (at the end of the "
                        "iteration, or after the epoch's training loop for per-epoch schedules).",
                    )
                elif at is call and not mod.loops_around(call) and self._just_built(mod, scope, receiver, call):
                    yield Hit(
                        call,
                        f"`{receiver}.step()` (line {call.lineno}) is called right after the "
                        "scheduler is built, before any optimizer step: the first value of the "
                        "schedule is skipped (a OneCycleLR starts near twice its initial LR)",
                        cause="Pre-stepping a scheduler to silence PyTorch's order warning "
                        "shifts the whole schedule by one step.",
                        fix=f"Delete this `{receiver}.step()` (and any LR reset after it); call "
                        f"`{receiver}.step()` only after `optimizer.step()` in the training loop.",
                    )

    def _same_iteration(self, mod: Module, sched: ast.Call, opt: ast.Call) -> bool:
        """``opt`` runs after ``sched`` in the same loop iteration, with no branch that holds
        ``sched`` but not ``opt``."""
        if opt.lineno <= sched.lineno:
            return False
        for a in mod.ancestors(sched):
            if isinstance(a, LOOP_TYPES):
                return mod.inside(opt, a)
            if isinstance(a, (ast.If, ast.Try)) and not mod.inside(opt, a):
                return False
        return False

    def _just_built(self, mod: Module, scope: Scope, receiver: str | None, call: ast.Call) -> bool:
        if receiver is None:
            return False
        for stmt, value in scope.values_of(receiver, call.lineno):
            if isinstance(value, ast.Call) and mod.kind_of_call(value) == "scheduler":
                return True
        return False


def _scheduler_steps(mod: Module, scope: Scope) -> list[tuple[ast.Call, str]]:
    """``scheduler.step()`` calls (no arguments) in ``scope``, with the scheduler's name."""
    out = []
    for call in mod.named_in(scope, "step"):
        receiver = dotted(method(call, "step"))
        if receiver and not (call.args or call.keywords) and mod.role(receiver) == "scheduler":
            out.append((call, receiver))
    return out


def _conditional(mod: Module, call: ast.AST) -> bool:
    """``call`` sits in a branch or loop of its function (a warmup guard, a fast-forward)."""
    return any(isinstance(a, (ast.If, ast.Try, *LOOP_TYPES)) for a in mod.ancestors(call))
