"""eval-in-train-mode: a validation loop under no_grad while nothing calls ``.eval()``."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, contains_word, dotted, method
from traindoc.lint.rules._common import Hit, Invalid


FRAMEWORK_HOOKS = frozenset(
    {"validation_step", "test_step", "predict_step", "on_validation_epoch_end", "on_test_epoch_end",
     "prediction_step", "evaluation_loop", "evaluate_step"}
)


class EvalInTrainMode:
    """A trained model runs under ``torch.no_grad()`` / ``torch.inference_mode()`` over a
    validation loader (or in a function named like ``evaluate``) while nothing in the file
    ever calls ``.eval()`` or ``.train(False)``: dropout stays active and BatchNorm updates its
    running statistics with validation data. Any ``.eval()`` call anywhere in the file keeps the
    rule quiet (it cannot see which module it reaches).
    """

    id: ClassVar[str] = "eval-in-train-mode"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                model.train()
                for x, y in train_loader:
                    optimizer.zero_grad()
                    criterion(model(x), y).backward()
                    optimizer.step()
                with torch.no_grad():
                    correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
            """,
            10,
        ),
        Invalid(
            """
            import torch

            @torch.no_grad()
            def evaluate(model, loader):
                losses = [criterion(model(x), y).item() for x, y in loader]
                return sum(losses) / len(losses)

            optimizer = torch.optim.AdamW(model.parameters())
            """,
            4,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch

        @torch.no_grad()
        def evaluate(model, loader):
            model.eval()
            losses = [criterion(model(x), y).item() for x, y in loader]
            model.train()
            return sum(losses) / len(losses)

        optimizer = torch.optim.AdamW(model.parameters())
        """,
        """
        import torch

        optimizer = torch.optim.AdamW(student.parameters())
        for x, y in train_loader:
            with torch.no_grad():
                target = teacher(x)
            loss = criterion(student(x), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        """
        import torch

        optimizer = torch.optim.AdamW(model.parameters())
        for x, y in train_loader:
            optimizer.zero_grad()
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                train_acc = (out.argmax(1) == y).float().mean()
        """,
        """
        import lightning as L
        import torch

        class Classifier(L.LightningModule):
            def validation_step(self, batch, batch_idx):
                x, y = batch
                with torch.no_grad():  # Lightning already runs this in eval mode
                    for chunk_x, chunk_y in zip(x.split(64), y.split(64)):
                        self.log("val_loss", self.loss_fn(self(chunk_x), chunk_y))

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=1e-3)
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        if _sets_eval_mode(mod):
            return
        models = mod.trained_models() - {"self"}  # `self(x)` inside a module is not "the model"
        if not models:
            return
        for scope in mod.scopes:
            if scope.name in FRAMEWORK_HOOKS:
                continue  # Lightning / Trainer put the model in eval mode around these
            blocks: list[tuple[ast.stmt, list[ast.stmt], str]] = []
            fn = scope.node
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for deco in fn.decorator_list:
                    mode = mod.with_mode(deco)
                    if mode in ("no_grad", "inference"):
                        blocks.append((fn, fn.body, _label(mod, deco)))
            for w in scope.withs:
                for item in w.items:
                    if mod.with_mode(item.context_expr) in ("no_grad", "inference"):
                        blocks.append((w, w.body, _label(mod, item.context_expr)))
            for node, body, label in blocks:
                loader = _eval_loader(body)
                if loader is None and not scope.is_eval and not contains_word(scope.name, ("valid",)):
                    continue
                model = _model_called(body, models)
                if model is None:
                    continue
                over = f" over `{loader}`" if loader else f" in `{scope.name}`"
                yield Hit(
                    node,
                    f"`{model}` runs under `{label}`{over} (line {node.lineno}) in train mode: "
                    f"nothing in this file calls `{model}.eval()`, so dropout stays active and "
                    "BatchNorm updates its running statistics with validation batches",
                    cause="`no_grad` turns off gradients, not training behaviour; only "
                    "`.eval()` switches dropout and BatchNorm to inference.",
                    fix=f"Call `{model}.eval()` before the evaluation loop and `{model}.train()` "
                    "after it.",
                )


def _sets_eval_mode(mod: Module) -> bool:
    for call in mod.named("eval"):
        if method(call, "eval") is not None and not call.args:
            return True
    for call in mod.named("train"):
        if method(call, "train") is not None and (call.args or call.keywords):
            return True  # .train(False), .train(mode=is_training)
    return False


def _label(mod: Module, expr: ast.AST) -> str:
    target = expr.func if isinstance(expr, ast.Call) else expr
    return (dotted(target) or "torch.no_grad") + "()"


def _eval_loader(body: list[ast.stmt]) -> str | None:
    """The validation data a loop in ``body`` iterates over (``val_loader``,
    ``loaders["val"]``), by name."""
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, (ast.For, ast.comprehension)):
                for m in ast.walk(n.iter):
                    if isinstance(m, (ast.Name, ast.Attribute)):
                        text = dotted(m)
                        if text and _is_eval_data(text.split(".")[-1]):
                            return text
                    elif isinstance(m, ast.Subscript) and isinstance(m.slice, ast.Constant):
                        key = m.slice.value
                        if isinstance(key, str) and key.lower() in EVAL_KEYS:
                            return ast.unparse(m)
    return None


EVAL_KEYS = ("val", "valid", "validation", "eval", "test", "dev")
DATA_WORDS = ("loader", "dl", "data", "dataset", "ds", "set", "batches", "iter", "split")


def _is_eval_data(name: str) -> bool:
    low = name.lower()
    tokens = low.split("_")
    eval_like = any(t.startswith(EVAL_KEYS) for t in tokens)
    data_like = any(t in DATA_WORDS or t.endswith(("loader", "data", "set")) for t in tokens)
    return eval_like and data_like


def _model_called(body: list[ast.stmt], models: set[str]) -> str | None:
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call):
                name = dotted(n.func)
                if name in models:
                    return name
                receiver = dotted(method(n, "generate", "forward"))
                if receiver in models:
                    return receiver
    return None
