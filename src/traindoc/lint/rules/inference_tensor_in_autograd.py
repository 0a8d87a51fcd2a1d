"""inference-tensor-in-autograd: an output computed under ``inference_mode`` flows into the loss."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, method
from traindoc.lint.rules._common import Hit, Invalid


class InferenceTensorInAutograd:
    """A value computed under ``torch.inference_mode()`` (typically a teacher's logits in
    distillation) is later used, through assignments in the same function, to compute the loss
    handed to backward. Inference tensors cannot be saved for backward: the step fails, or, with
    a learnable temperature dividing the teacher's logits, the temperature cannot be trained
    (seed 003). Quiet for ``torch.no_grad()`` and when the value is ``.clone()``d outside the
    block.
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
    )
    valid: ClassVar[tuple[str, ...]] = (
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
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        for scope in mod.scopes:
            if not scope.trained:
                continue
            blocks = [
                w
                for w in scope.withs
                if any(mod.with_mode(i.context_expr) == "inference" for i in w.items)
            ]
            if not blocks:
                continue
            feeding = mod.depends(scope, scope.trained)
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

    def _produced(self, scope: Scope, block: ast.With | ast.AsyncWith, end: int) -> list[str]:
        start = block.lineno
        out = []
        for target, stmt, _ in scope.assigns:
            if start < stmt.lineno <= end and "." not in target and target not in out:
                out.append(target)
        return out

    def _cloned_after(self, scope: Scope, name: str, end: int) -> bool:
        for stmt, value in scope.values_of(name):
            if stmt.lineno > end and method(value, "clone") is not None:
                return True
        return False

    def _use(self, mod: Module, scope: Scope) -> str:
        if scope.backwards:
            b = scope.backwards[0]
            return f"`{b.text()}`, line {b.call.lineno}"
        for ret in scope.returns:
            if ret.value is not None:
                return f"`return {mod.text(ret.value)}`, line {ret.lineno}"
        return "its backward"
