"""inference-tensor-in-autograd: an output computed under ``inference_mode`` flows into the loss."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, dotted, method
from traindoc.lint.rules._common import Hit, Invalid


class InferenceTensorInAutograd:
    """A value computed under ``torch.inference_mode()`` (typically a teacher's logits in
    distillation) is later used, through assignments in the same function, to compute the loss
    handed to backward. Inference tensors cannot be saved for backward: the step fails, or, with
    a learnable temperature dividing the teacher's logits, the temperature cannot be trained
    (seed 003). The value may also come from a function or method of this file that runs
    under ``inference_mode`` (decorated with it, or returning from inside the block), e.g.
    teacher features that reach a learnable adapter, or read from a cache (a dict or an
    attribute, ``self.cache[key]``) that is filled under ``inference_mode``. Quiet for ``torch.no_grad()`` and when the
    value is ``.clone()``d outside the block.
    """

    id: ClassVar[str] = "inference-tensor-in-autograd"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            for ids in loader:
                with torch.inference_mode():
                    t_logits = teacher(ids)
                s_logits = student(ids)
                T = temperature.exp()
                loss = F.kl_div(
                    F.log_softmax(s_logits / T, -1), F.softmax(t_logits / T, -1), reduction="batchmean"
                ) * T**2
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            5,
        ),
        Invalid(
            """
            import torch

            class Distiller:
                def compute_loss(self, model, inputs):
                    with torch.inference_mode():
                        target = self.teacher(**inputs).logits
                    student = model(**inputs).logits
                    loss = torch.nn.functional.mse_loss(student, target)
                    return loss
            """,
            5,
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            @torch.inference_mode()
            def teacher_features(teacher, x):
                return teacher(x)

            adapter = torch.nn.Linear(768, 384)
            optimizer = torch.optim.AdamW([*student.parameters(), *adapter.parameters()], lr=1e-4)
            for x in loader:
                feats = teacher_features(teacher, x)
                loss = F.mse_loss(student(x), adapter(feats))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            11,
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F
            from transformers import Trainer

            class DistillTrainer(Trainer):
                def _teacher_hidden(self, inputs):
                    with torch.inference_mode():
                        return self.teacher(**inputs).last_hidden_state

                def compute_loss(self, model, inputs, return_outputs=False):
                    hidden = self._teacher_hidden(inputs)
                    outputs = model(**inputs)
                    loss = F.mse_loss(outputs.last_hidden_state, self.proj(hidden))
                    return loss
            """,
            11,
        ),
        Invalid(
            """
            import torch

            class Distiller:
                def __init__(self, teacher, student, opt):
                    self.teacher, self.student, self.opt = teacher, student, opt
                    self.cache = {}

                def targets(self, key, x):
                    if key not in self.cache:
                        with torch.inference_mode():
                            self.cache[key] = self.teacher(x)
                    return self.cache[key]

                def step(self, key, x):
                    t = self.targets(key, x)
                    loss = ((self.student(x) - t) ** 2).mean()
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()
            """,
            15,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch

        class Distiller:
            def __init__(self, teacher, student, opt):
                self.teacher, self.student, self.opt = teacher, student, opt
                self.cache = {}

            def targets(self, key, x):
                if key not in self.cache:
                    with torch.no_grad():
                        self.cache[key] = self.teacher(x)
                return self.cache[key]

            def step(self, key, x):
                t = self.targets(key, x)
                loss = ((self.student(x) - t) ** 2).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
        """,
        """
        import torch
        import torch.nn.functional as F

        for ids in loader:
            with torch.no_grad():
                t_logits = teacher(ids)
            s_logits = student(ids)
            loss = F.kl_div(F.log_softmax(s_logits / T, -1), F.softmax(t_logits / T, -1), reduction="batchmean")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        """
        import torch
        import torch.nn.functional as F

        for ids in loader:
            with torch.inference_mode():
                t_logits = teacher(ids)
            t_logits = t_logits.clone()
            loss = F.mse_loss(student(ids), t_logits)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        # the inference tensor is copied where it is used: a normal tensor reaches the loss
        """
        import torch
        import torch.nn.functional as F

        for obs, act, rew, nxt in replay:
            with torch.inference_mode():
                bootstrap = rew + 0.99 * target_net(nxt).amax(dim=1)
            td = F.smooth_l1_loss(online(obs).gather(1, act).squeeze(1), bootstrap.clone())
            optimizer.zero_grad()
            td.backward()
            optimizer.step()
        """,
        """
        import torch

        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            with torch.inference_mode():
                val_logits = model(val_x)
            acc = (val_logits.argmax(-1) == val_y).float().mean()
        """,
        """
        import torch
        import torch.nn.functional as F

        @torch.no_grad()
        def teacher_features(teacher, x):
            return teacher(x)

        @torch.inference_mode()
        def embed_for_retrieval(encoder, x):
            return encoder(x)

        for x in loader:
            feats = teacher_features(teacher, x)
            index.add(embed_for_retrieval(student, x))
            loss = F.mse_loss(student(x), adapter(feats))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        stores = _inference_stores(mod)
        for scope in mod.scopes:
            if not scope.trained:
                continue
            blocks = [
                w
                for w in scope.withs
                if any(mod.with_mode(i.context_expr) == "inference" for i in w.items)
            ]
            from_helpers = [
                (t, stmt, h) for t, stmt, v in scope.assigns
                if "." not in t and isinstance(v, ast.Call)
                and (h := mod.callee_scope(v)) is not None and _under_inference(mod, h, stores)
            ]
            cached = [
                (t, stmt, v) for t, stmt, v in scope.assigns
                if "." not in t and isinstance(v, ast.expr) and not mod.grad_mode(stmt) and _reads(v, stores)
            ] if stores else []
            if not blocks and not from_helpers and not cached:
                continue
            feeding = mod.depends(scope, scope.trained)
            yield from self._from_helpers(mod, scope, feeding, from_helpers)
            yield from self._from_cache(mod, scope, feeding, cached, stores)
            for block in blocks:
                end = block.end_lineno or block.lineno
                for name in self._produced(scope, block, end):
                    if name not in feeding or self._cloned_after(scope, name, end):
                        continue
                    use = self._use(mod, scope)
                    yield Hit(
                        block,
                        f"`{name}` is computed under `torch.inference_mode()` (line "
                        f"{block.lineno}) and then used to compute the loss handed to backward "
                        f"({use}): inference tensors cannot be saved for backward, so the step "
                        "fails or a learnable parameter it meets (a temperature) cannot train",
                        cause="`inference_mode` marks its outputs as inference tensors, which "
                        "autograd refuses to record; `no_grad` gives normal tensors with no "
                        "history, which is what a frozen teacher needs.",
                        fix=f"Use `torch.no_grad()` instead of `torch.inference_mode()` here, or "
                        f"`{name} = {name}.clone()` after the block.",
                    )
                    break

    def _from_helpers(
        self, mod: Module, scope: Scope, feeding: set[str], found: list[tuple[str, ast.stmt, Scope]]
    ) -> Iterator[Hit]:
        """``name = helper(...)`` where ``helper`` runs under ``inference_mode``."""
        for target, stmt, helper in found:
            if target not in feeding or self._cloned_after(scope, target, stmt.lineno):
                continue
            yield Hit(
                stmt,
                f"`{target}` is returned by `{helper.name}` (line {getattr(helper.node, 'lineno', 1)}), which "
                f"runs under `torch.inference_mode()`, and then used to compute the loss handed "
                f"to backward ({self._use(mod, scope)}): inference tensors cannot be saved for "
                "backward, so the step fails or a learnable parameter it meets (an adapter, a "
                "temperature) cannot train",
                cause="`inference_mode` marks its outputs as inference tensors, which autograd "
                "refuses to record; `no_grad` gives normal tensors with no history, which is what "
                "a frozen teacher needs.",
                fix=f"Use `torch.no_grad()` instead of `torch.inference_mode()` in `{helper.name}`, "
                f"or `{target} = {target}.clone()` after the call.",
            )

    def _from_cache(
        self, mod: Module, scope: Scope, feeding: set[str], found: list[tuple[str, ast.stmt, ast.expr]],
        stores: dict[str, ast.stmt],
    ) -> Iterator[Hit]:
        """``t = self.cache[key]`` (or ``self.teacher_out``) where the cache is filled under
        ``inference_mode`` somewhere in this file."""
        for target, stmt, value in found:
            if target not in feeding or self._cloned_after(scope, target, stmt.lineno):
                continue
            store = _reads(value, stores) or ""
            filled = stores[store]
            yield Hit(
                stmt,
                f"`{target}` is read from `{store}`, filled under `torch.inference_mode()` (line "
                f"{filled.lineno}), and then used to compute the loss handed to backward "
                f"({self._use(mod, scope)}): inference tensors cannot be saved for backward, so "
                "the step fails or a learnable parameter it meets cannot train",
                cause="`inference_mode` marks its outputs as inference tensors, which autograd "
                "refuses to record, and keeping them in a cache does not change that.",
                fix=f"Fill `{store}` under `torch.no_grad()` instead of `torch.inference_mode()`, "
                f"or `.clone()` the cached tensor before it reaches the loss.",
            )

    def _produced(self, scope: Scope, block: ast.With | ast.AsyncWith, end: int) -> list[str]:
        start = block.lineno
        out = []
        for target, stmt, _ in scope.assigns:
            if start < stmt.lineno <= end and "." not in target and target not in out:
                out.append(target)
        return out

    def _cloned_after(self, scope: Scope, name: str, end: int) -> bool:
        """``name = name.clone()`` after the block, or every later read of ``name`` is a
        ``name.clone()`` (``F.mse_loss(q, target.clone())``): only normal tensors go on."""
        for stmt, value in scope.values_of(name):
            if stmt.lineno > end and method(value, "clone") is not None:
                return True
        reads = clones = 0
        for node in ast.walk(scope.node):
            if getattr(node, "lineno", 0) <= end:
                continue
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                reads += 1
            elif isinstance(node, ast.Attribute) and node.attr == "clone" and isinstance(node.value, ast.Name) \
                    and node.value.id == name:
                clones += 1
        return reads > 0 and reads == clones

    def _use(self, mod: Module, scope: Scope) -> str:
        if scope.backwards:
            b = scope.backwards[0]
            return f"`{b.text()}`, line {b.call.lineno}"
        for ret in scope.returns:
            if ret.value is not None:
                return f"`return {mod.text(ret.value)}`, line {ret.lineno}"
        return "its backward"


def _under_inference(mod: Module, scope: Scope, stores: dict[str, ast.stmt]) -> bool:
    """The function runs under ``inference_mode``: decorated with it, or every value it returns
    is computed inside an ``inference_mode`` block or read from a cache filled in one."""
    fn = scope.node
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if any(mod.with_mode(deco) == "inference" for deco in fn.decorator_list):
        return True
    returns = [r for r in scope.returns if r.value is not None]
    return bool(returns) and all(
        mod.grad_mode(r) == "inference" or (r.value is not None and _reads(r.value, stores)) for r in returns
    )


def _inference_stores(mod: Module) -> dict[str, ast.stmt]:
    """Containers and attributes filled under ``inference_mode``: ``self.cache[key] = ...``,
    ``cache[key] = ...``, ``self.teacher_out = ...``; dotted name -> the assignment."""
    out: dict[str, ast.stmt] = {}
    for block in {b: None for scope in mod.scopes for b, _ in mod.mode_blocks(scope, "inference")}:
        for stmt in ast.walk(block):
            if not isinstance(stmt, ast.Assign):
                continue
            for target in stmt.targets:
                if isinstance(target, ast.Subscript):
                    name = dotted(target.value)
                elif isinstance(target, ast.Attribute):
                    name = dotted(target)
                else:
                    continue
                if name:
                    out.setdefault(name, stmt)
    return out


def _reads(value: ast.AST, stores: dict[str, ast.stmt]) -> str | None:
    """The inference-filled store ``value`` reads (``self.cache[key]``, ``self.teacher_out``)."""
    for n in ast.walk(value):
        if isinstance(n, ast.Subscript):
            name = dotted(n.value)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load):
            name = dotted(n)
        else:
            continue
        if name in stores:
            return name
    return None
