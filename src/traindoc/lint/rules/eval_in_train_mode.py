"""eval-in-train-mode: a validation loop under no_grad while nothing calls ``.eval()``."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, contains_word, dotted, method, mode_free, mode_switch, sets_train_mode
from traindoc.lint.rules._common import Hit, Invalid


FRAMEWORK_HOOKS = frozenset(
    {"validation_step", "test_step", "predict_step", "on_validation_epoch_end", "on_test_epoch_end",
     "prediction_step", "evaluation_loop", "evaluate_step"}
)


class EvalInTrainMode:
    """A trained model runs under ``torch.no_grad()`` / ``torch.inference_mode()`` over a
    validation loader (or in a function named like ``evaluate``) while nothing in the file
    ever calls ``.eval()`` or ``.train(False)``: dropout stays active and BatchNorm updates its
    running statistics with validation data. Two more shapes are followed when the file does
    call ``.eval()`` somewhere: validation inlined in the training loop (after the loop's
    backward and optimizer step) with no ``.eval()`` in the loop before it, and an EMA copy
    (``ema = copy.deepcopy(model)``, which keeps the model's train mode) evaluated while nothing
    calls ``ema.eval()``. Otherwise any ``.eval()`` call in the file keeps the rule quiet (it
    cannot see which module it reaches).
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
        # a model of this file with dropout: its mode matters
        Invalid(
            """
            import torch
            from torch import nn

            class Tagger(nn.Module):
                def __init__(self, vocab, tags):
                    super().__init__()
                    self.embed = nn.Embedding(vocab, 64)
                    self.rnn = nn.GRU(64, 64, num_layers=2, dropout=0.3, batch_first=True)
                    self.out = nn.Linear(64, tags)

                def forward(self, tokens):
                    return self.out(self.rnn(self.embed(tokens))[0])

            tagger = Tagger(5000, 17)
            opt = torch.optim.Adam(tagger.parameters(), lr=1e-3)
            for tokens, tags in train_batches:
                opt.zero_grad()
                nn.functional.cross_entropy(tagger(tokens).flatten(0, 1), tags.flatten()).backward()
                opt.step()
            with torch.no_grad():
                hits = sum((tagger(t).argmax(-1) == g).sum().item() for t, g in test_batches)
            """,
            20,
        ),
        Invalid(
            """
            import torch

            def train(model, train_loader, val_loader, optimizer, epochs):
                for epoch in range(epochs):
                    model.train()
                    for x, y in train_loader:
                        optimizer.zero_grad()
                        loss = criterion(model(x), y)
                        loss.backward()
                        optimizer.step()
                    with torch.no_grad():
                        val_loss = sum(criterion(model(x), y).item() for x, y in val_loader)
                    print(epoch, val_loss)

            def test(model, test_loader):
                model.eval()
                with torch.no_grad():
                    return sum((model(x).argmax(1) == y).sum().item() for x, y in test_loader)
            """,
            11,
        ),
        Invalid(
            """
            import copy
            import torch

            ema_model = copy.deepcopy(model)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                model.train()
                for x, y in train_loader:
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    with torch.no_grad():
                        for e, p in zip(ema_model.parameters(), model.parameters()):
                            e.mul_(0.999).add_(p, alpha=0.001)
                model.eval()
                with torch.no_grad():
                    acc = sum((ema_model(x).argmax(1) == y).sum().item() for x, y in val_loader)
            """,
            17,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            def train(loader, val_loader, opt, epochs):
                model = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.Dropout(0.1), nn.Linear(64, 1))
                for epoch in range(epochs):
                    for x, y in loader:
                        loss = nn.functional.mse_loss(model(x), y)
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
                    with torch.no_grad():
                        val = sum(nn.functional.mse_loss(model(x), y).item() for x, y in val_loader)
            """,
            12,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        # Monte Carlo dropout: the evaluation keeps dropout on by calling .train() itself
        """
        import torch

        @torch.no_grad()
        def predictive(net, x, samples=30):
            net.train()
            draws = torch.stack([net(x) for _ in range(samples)])
            return draws.mean(0), draws.var(0)

        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        for x, y in train_loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
        mean, var = predictive(net, x_test)
        """,
        # built here from layers that act the same in both modes: .eval() would change nothing
        """
        import torch
        from torch import nn

        class Scorer(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(dim, 128), nn.GELU(), nn.LayerNorm(128))
                self.head = nn.Linear(128, 1)

            def forward(self, x):
                return self.head(self.body(x))

        scorer = Scorer(32).to(device)
        opt = torch.optim.SGD(scorer.parameters(), lr=0.05)
        for x, y in train_loader:
            opt.zero_grad()
            nn.functional.mse_loss(scorer(x), y).backward()
            opt.step()
        with torch.no_grad():
            test_mse = sum(nn.functional.mse_loss(scorer(x), y).item() for x, y in test_loader)
        """,
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
        """
        import copy
        import torch

        ema_model = copy.deepcopy(model).eval()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(epochs):
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                val_loss = sum(criterion(model(x), y).item() for x, y in val_loader)
                ema_acc = sum((ema_model(x).argmax(1) == y).sum().item() for x, y in val_loader)
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        models = mod.trained_models() - {"self"}  # `self(x)` inside a module is not "the model"
        if not models:
            return
        switched = any(_switches_to_eval(mod, c) for c in mod.named("eval", "train"))
        emas = _ema_copies(mod, models)
        for scope in mod.scopes:
            if scope.name in FRAMEWORK_HOOKS:
                continue  # Lightning / Trainer put the model in eval mode around these
            for node, body, label in _no_grad_blocks(mod, scope):
                if switched and not emas and not mod.loops_around(node):
                    continue  # only validation inlined in a loop is judged in such a file
                loader = _eval_loader(body)
                if loader is None and not scope.is_eval and not contains_word(scope.name, ("valid",)):
                    continue
                over = f" over `{loader}`" if loader else f" in `{scope.name}`"
                model = _model_called(body, models)
                if model is not None and (mode_free(mod, model) or sets_train_mode(body, model)):
                    continue  # built without dropout or running statistics; or kept in train mode on purpose
                if model is not None and (not switched or (loader and _inline_in_train_mode(mod, scope, node))):
                    yield Hit(
                        node,
                        f"`{model}` runs under `{label}`{over} (line {node.lineno}) in train mode: "
                        + (f"nothing in this file calls `{model}.eval()`" if not switched else
                           "the training loop around it calls no `.eval()` before it")
                        + ", so dropout stays active and BatchNorm updates its running statistics "
                        "with validation batches",
                        cause="`no_grad` turns off gradients, not training behaviour; only "
                        "`.eval()` switches dropout and BatchNorm to inference.",
                        fix=f"Call `{model}.eval()` before the evaluation loop and `{model}.train()` "
                        "after it.",
                    )
                    continue
                ema = _model_called(body, set(emas))
                if ema is not None and not mode_free(mod, emas[ema][0]):
                    source, built = emas[ema]
                    yield Hit(
                        node,
                        f"`{ema}` runs under `{label}`{over} (line {node.lineno}) in train mode: it "
                        f"is a copy of `{source}` (line {built.lineno}), which keeps the mode "
                        f"`{source}` had when copied, and nothing calls `{ema}.eval()`, so dropout "
                        "stays active and BatchNorm updates its running statistics with validation "
                        "batches",
                        cause="`copy.deepcopy` copies the `training` flag; `.eval()` on the live "
                        "model does not reach the copy.",
                        fix=f"Call `{ema}.eval()` once after copying it (`{ema} = "
                        f"copy.deepcopy({source}).eval()`).",
                    )


def _no_grad_blocks(mod: Module, scope: Scope) -> list[tuple[ast.stmt, list[ast.stmt], str]]:
    """The ``no_grad`` / ``inference_mode`` blocks of ``scope``: (node, body, label); a function
    decorated with one is a block of its own."""
    return [(node, getattr(node, "body"), _label(mod, expr))
            for node, expr in mod.mode_blocks(scope, "no_grad", "inference")]


def _inline_in_train_mode(mod: Module, scope: Scope, block: ast.stmt) -> bool:
    """``block`` sits in a loop of ``scope`` that runs backward and an optimizer step before it,
    and nothing switches to eval mode in that loop before (or inside) ``block``, while the
    model is in train mode there (``.train()`` in the loop, or no ``.eval()`` before it)."""
    for loop in mod.loops_around(block):
        trained = [s for s, _ in mod.backwards_in(scope, loop) if s.lineno < block.lineno]
        stepped = [s for s, _, _ in mod.steps_in(scope, loop) if s.lineno < block.lineno]
        if not (trained and stepped):
            continue
        end = block.end_lineno or block.lineno
        calls = [c for c in mod.calls_in(scope, loop) if c.lineno <= end]
        if any(_switches_to_eval(mod, c) for c in calls):
            return False
        if any(_switches_to_eval(mod, c) for _, h in mod.helpers(scope, loop) for c in h.calls):
            return False
        in_loop_train = any((mode_switch(c) or ("", ""))[1] == "train" for c in calls)
        eval_before = any(_switches_to_eval(mod, c) and c.lineno < loop.lineno for c in scope.calls)
        return in_loop_train or not eval_before
    return False


def _switches_to_eval(mod: Module, call: ast.Call) -> bool:
    """``call`` may put a module in eval mode (``.train(flag)`` too)."""
    return (mode_switch(call) or ("", "train"))[1] != "train"


def _ema_copies(mod: Module, models: set[str]) -> dict[str, tuple[str, ast.Call]]:
    """Copies of a trained model that nothing puts in eval mode: ``ema = copy.deepcopy(model)``
    with no ``ema.eval()`` / ``ema.train(False)`` in the file; name -> (model, the copy call)."""
    out: dict[str, tuple[str, ast.Call]] = {}
    for name, calls in mod.built.items():
        for call in calls:
            source = dotted(call.args[0]) if call.args else None
            if mod.callee(call) in ("copy.deepcopy", "deepcopy") and source in models:
                out[name] = (source, call)
    for call in mod.named("eval", "train") if out else ():
        found = mode_switch(call)
        if found is not None and found[0] in out and found[1] != "train":
            del out[found[0]]
    return out


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
