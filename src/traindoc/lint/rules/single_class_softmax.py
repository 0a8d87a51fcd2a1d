"""single-class-softmax: a cross-entropy or a softmax over the one output of a layer."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, arg, method, number, value_of
from traindoc.lint._outputs import Outputs, loss_calls
from traindoc.lint.rules._common import Hit, Invalid

# Layers whose output has the width of their input: what follows a Linear(h, 1) in a Sequential
# is still one wide.
_KEEP_WIDTH = frozenset({
    "ReLU", "ReLU6", "LeakyReLU", "PReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Tanh",
    "Sigmoid", "Hardtanh", "Hardsigmoid", "Hardswish", "Softplus", "Dropout", "Dropout1d", "Dropout2d",
    "AlphaDropout", "Identity", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "Softmax", "LogSoftmax",
})
# Functions and tensor methods whose result has the width of their first argument.
_KEEP_WIDTH_CALLS = frozenset({"relu", "sigmoid", "tanh", "dropout", "gelu", "silu", "leaky_relu", "float",
                               "contiguous", "to", "clone"})
_SOFTMAX = frozenset({"softmax", "log_softmax"})


class SingleClassSoftmax:
    """The loss normalizes over a layer's one output: ``F.cross_entropy`` or an
    ``nn.CrossEntropyLoss()`` given the output of a model whose last layer is ``nn.Linear(h, 1)``
    or a convolution with one output channel; a softmax or log_softmax over that one output
    (``nn.Softmax(dim=-1)`` after that layer in an ``nn.Sequential``, ``F.softmax(self.fc(x),
    dim=-1)``, a convolution's ``dim=1``). A Linear's ``dim=1`` is left alone: on ``[B, T, 1]``
    scores it is attention pooling over T. The softmax of one value is 1, so the loss is a constant and no gradient reaches the
    model (PyTorch's DDP tutorial series: ``nn.Linear(20, 1)`` with ``F.cross_entropy``). The
    model is followed from the loss's input through names, ``self`` attributes set in a class
    (the wrapper that wraps the attribute itself, as ``self.model = DDP(self.model)``, leads back
    to it), ``.to()``, DDP, the returns of the file's functions (a tuple's element by its
    position) and a parameter's argument at the file's one call; a class of the file by what
    its ``forward`` returns. The width must be a number the file shows.
    """

    id: ClassVar[str] = "single-class-softmax"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            class Trainer:
                def __init__(self, model, optimizer):
                    self.model = model.to("cpu")
                    self.optimizer = optimizer
                    self.model = torch.nn.parallel.DistributedDataParallel(self.model)

                def _run_batch(self, source, targets):
                    self.optimizer.zero_grad()
                    output = self.model(source)
                    loss = F.cross_entropy(output, targets)
                    loss.backward()
                    self.optimizer.step()

            def load_train_objs():
                model = torch.nn.Linear(20, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
                return model, optimizer

            model, optimizer = load_train_objs()
            trainer = Trainer(model, optimizer)
            """,
            13,
        ),
        Invalid(
            """
            import torch.nn as nn

            model = nn.Sequential(
                nn.Linear(10, 32), nn.ReLU(),
                nn.Linear(32, 1), nn.Softmax(dim=-1),
            )
            criterion = nn.BCELoss()
            """,
            5,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            class UNet(nn.Module):
                def __init__(self, n_channels, n_classes):
                    super().__init__()
                    self.inc = nn.Conv2d(n_channels, 16, 3, padding=1)
                    self.outc = nn.Conv2d(16, n_classes, kernel_size=1)

                def forward(self, x):
                    x = F.relu(self.inc(x))
                    logits = self.outc(x)
                    return logits

            net = UNet(n_channels=3, n_classes=1)
            criterion = nn.CrossEntropyLoss()
            for images, masks in [(torch.randn(2, 3, 8, 8), torch.rand(2, 1, 8, 8))]:
                pred = net(images)
                loss = criterion(pred, masks)

            class Scorer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.score = nn.Linear(64, 1)

                def forward(self, h):
                    return F.log_softmax(self.score(h), dim=-1)
            """,
            20, 28,
        ),
        Invalid(
            """
            import lightning as L
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            class Regressor(L.LightningModule):
                def __init__(self, n_features=16, hidden=32):
                    super().__init__()
                    self.net = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU())
                    self.head = nn.Linear(hidden, 1)

                def forward(self, x):
                    return self.head(self.net(x))

                def training_step(self, batch, batch_idx):
                    x, y = batch
                    loss = F.cross_entropy(self(x), y)
                    self.log("train_loss", loss)
                    return loss

                def configure_optimizers(self):
                    return torch.optim.Adam(self.parameters(), lr=1e-3)
            """,
            17,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        regressor = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
        classifier = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
        binary = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1), nn.Sigmoid())
        x, y = torch.randn(8, 16), torch.rand(8, 1)
        loss = F.mse_loss(regressor(x), y) + F.cross_entropy(classifier(x), y.long().squeeze(1))
        loss = loss + F.binary_cross_entropy_with_logits(regressor(x), y) + F.binary_cross_entropy(binary(x), y)
        """,
        """
        import math
        import torch.nn as nn

        class Attention(nn.Module):  # over one conditioning token: a softmax inside the model
            def __init__(self, d):
                super().__init__()
                self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)

            def forward(self, x, ctx):
                w = (self.q(x) @ self.k(ctx).transpose(-2, -1) / math.sqrt(x.shape[-1])).softmax(dim=-1)
                return w @ ctx

        class Net(nn.Module):
            def __init__(self, n_classes):
                super().__init__()
                self.body = nn.Conv2d(3, 8, 3)
                self.head = nn.Conv2d(8, n_classes, 1)

            def forward(self, x):
                return self.head(self.body(x)).softmax(dim=-1)  # over the width, not the one channel

        def build(args):
            return Net(args.n_classes)
        """,
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class AttentionPool(nn.Module):  # scores [B, T, 1], a softmax over the T positions
            def __init__(self, d):
                super().__init__()
                self.score = nn.Sequential(nn.Linear(d, 32), nn.Tanh(), nn.Linear(32, 1), nn.Softmax(dim=1))
                self.attn = nn.Linear(d, 1)

            def forward(self, h):
                w = F.softmax(self.attn(h), dim=1)
                return (w * h).sum(1) + (self.score(h) * h).sum(1)
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        widths = _Widths(mod)
        for call in mod.named("cross_entropy", "CrossEntropyLoss"):
            yield from self._cross_entropy(mod, widths, call)
        for call in mod.named(*_SOFTMAX, "Softmax", "LogSoftmax", "Sequential"):
            yield from self._softmax(mod, widths, call)

    def _cross_entropy(self, mod: Module, widths: _Widths, call: ast.Call) -> Iterator[Hit]:
        if mod.callee(call) not in ("torch.nn.functional.cross_entropy", "torch.nn.CrossEntropyLoss"):
            return
        for use in loss_calls(mod, call):
            given = arg(use, 0, "input")
            found = widths.one_wide(given, use) if given is not None else None
            if found is not None:
                layer = found[0]
                yield Hit(
                    use,
                    f"`{mod.text(use)}` takes the output of `{mod.text(layer)}` (line {layer.lineno}), "
                    "one class: its log_softmax is 0 for every row, so the loss is a constant 0 and no "
                    "gradient reaches the model",
                    cause="cross_entropy normalizes over classes; a layer with one output gives it one class.",
                    fix=f"For values (regression), `F.mse_loss`; for a binary target, "
                        f"`F.binary_cross_entropy_with_logits` on this one output; for C classes, give "
                        f"`{mod.text(layer)}` C outputs.",
                )

    def _softmax(self, mod: Module, widths: _Widths, call: ast.Call) -> Iterator[Hit]:
        q = mod.callee(call) or ""
        name = q.rpartition(".")[2]
        if name == "Sequential" and q.startswith("torch.nn."):
            for before, layer in zip(call.args, call.args[1:]):
                if not (isinstance(layer, ast.Call) and isinstance(before, ast.Call)):
                    continue
                kind = (mod.callee(layer) or "").rpartition(".")[2]
                width = widths.of_layer(before)
                if kind in ("Softmax", "LogSoftmax") and width is not None and width[0] == 1 \
                        and _over(arg(layer, 0, "dim"), width[1]):
                    yield self._hit(mod, layer, before)
            return
        if name not in _SOFTMAX or not (q.startswith("torch.") or method(call, *_SOFTMAX) is not None):
            return
        receiver = method(call, *_SOFTMAX)
        x = receiver if receiver is not None and not q.startswith("torch.") else arg(call, 0, "input")
        dim = arg(call, 0, "dim") if x is receiver else arg(call, 1, "dim")
        found = widths.one_wide(x, call) if x is not None else None
        if found is not None and _over(dim, found[1]):
            yield self._hit(mod, call, found[0])

    def _hit(self, mod: Module, softmax: ast.Call, layer: ast.Call) -> Hit:
        return Hit(
            softmax,
            f"`{mod.text(softmax)}` normalizes the one output of `{mod.text(layer)}` (line {layer.lineno}): "
            "the softmax of one value is 1 for every input, so the loss that reads it is a constant "
            "and no gradient reaches the model",
            cause="A softmax normalizes across classes; over one unit it is the constant 1. A one-output "
                  "binary classifier needs a sigmoid.",
            fix="Use `torch.sigmoid` (or, better, drop the activation and use "
                "`F.binary_cross_entropy_with_logits` on the raw output); for C classes, give the layer C "
                "outputs and keep the softmax.",
        )


def _over(dim: ast.expr | None, kind: str) -> bool:
    """Does a softmax over ``dim`` surely run over a layer's output width? A Linear's width is
    the last dimension: ``dim=-1``. Its ``dim=1`` is the width of a ``[B, 1]`` batch but the
    sequence of a ``[B, T, 1]`` one, attention pooling's scores (``nn.Linear(d, 1)``, then a
    softmax over the T positions), which the file does not tell apart: not judged. A
    convolution's width is dimension 1."""
    d = number(dim) if dim is not None else None
    return d == -1 if kind == "linear" else d == 1


class _Widths:
    """The output width of the layers a value comes from, as far as the file shows it."""

    def __init__(self, mod: Module) -> None:
        self.mod = mod
        self.outputs = Outputs(mod, _KEEP_WIDTH_CALLS)

    def one_wide(self, node: ast.expr, at: ast.AST) -> tuple[ast.Call, str] | None:
        """The layer (``nn.Linear(h, 1)``, a one-channel convolution) whose output ``node`` is,
        with "linear" or "conv"; None when it is wider or not known."""
        made = self.outputs.origin(node, at, 8)
        found = self._of_module(made, 8) if made is not None else None
        return (found[2], found[1]) if found is not None and found[0] == 1 else None

    def of_layer(self, call: ast.Call) -> tuple[int, str] | None:
        found = self._of_module(call, 6)
        return (found[0], found[1]) if found is not None else None

    def _of_module(self, call: ast.Call, depth: int) -> tuple[int, str, ast.Call] | None:
        """A module's output width: a Linear's out_features, a convolution's out_channels, a
        Sequential's last layer that sets one, a class of the file by what ``forward`` returns."""
        mod = self.mod
        q = mod.callee(call) or ""
        last = q.rpartition(".")[2]
        if q.startswith("torch.nn."):
            if last in ("Linear", "LazyLinear"):
                out = arg(call, 0 if last == "LazyLinear" else 1, "out_features")
                return _width(mod, out, call, "linear")
            if last.startswith(("Conv", "LazyConv")) and last[-2:] in ("1d", "2d", "3d"):
                out = arg(call, 0 if last.startswith("Lazy") else 1, "out_channels")
                return _width(mod, out, call, "conv")
            if last == "Sequential":
                for layer in reversed(call.args):
                    if not isinstance(layer, ast.Call):
                        return None
                    kind = (mod.callee(layer) or "").rpartition(".")[2]
                    if kind not in _KEEP_WIDTH:
                        return self._of_module(layer, depth - 1) if depth > 0 else None
            return None
        own = self.outputs.of_class(call)
        made = self.outputs.returned(own, depth) if own is not None else None
        return self._of_module(made, depth - 1) if made is not None and depth > 0 else None


def _width(mod: Module, node: ast.expr | None, at: ast.Call, kind: str) -> tuple[int, str, ast.Call] | None:
    value = number(value_of(mod, node, at)) if node is not None else None
    return (int(value), kind, at) if value is not None and value == int(value) else None

