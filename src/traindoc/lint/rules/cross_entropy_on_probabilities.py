"""cross-entropy-on-probabilities: a cross-entropy or an nll_loss given a softmax's output."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, arg, method, number
from traindoc.lint._outputs import Outputs, loss_calls
from traindoc.lint.rules._common import Hit, Invalid

# Calls and tensor methods whose result holds their first argument's values: probabilities stay
# probabilities through a move, a cast or a reshape.
_SAME_VALUES = frozenset({
    "to", "cpu", "cuda", "float", "double", "half", "contiguous", "clone", "view", "reshape", "resize",
    "squeeze", "unsqueeze", "flatten", "permute", "transpose",
})
_LOSSES = {
    "torch.nn.functional.cross_entropy": "cross_entropy",
    "torch.nn.functional.nll_loss": "nll_loss",
    "torch.nn.CrossEntropyLoss": "cross_entropy",
    "torch.nn.NLLLoss": "nll_loss",
}


class CrossEntropyOnProbabilities:
    """A class-index loss (``F.cross_entropy``, ``nn.CrossEntropyLoss``, ``F.nll_loss``,
    ``nn.NLLLoss``) whose input is a softmax's output: ``F.softmax``/``torch.softmax``/
    ``.softmax()`` (not ``log_softmax``), an ``nn.Softmax`` module, an ``nn.Sequential`` whose
    last layer is one, or a module class of the file whose ``forward`` has one return that is
    one of these. The input is followed back through names, ``self`` attributes, moves, casts
    and reshapes (``.view``, ``.resize``, ``.to``) and module calls (``model(x)``, DDP,
    ``self(x)``); a log on the way (``torch.log(p)``), a clamp or any other call ends the walk
    quietly, as does a ``forward`` with two returns (logits in training, probabilities in
    eval). A softmax over dim 0 is left alone. One finding per softmax, at its first loss call
    that runs with autograd on."""

    id: ClassVar[str] = "cross-entropy-on-probabilities"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            class SmallCNN(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 16, 3, padding=1)
                    self.fc = nn.Linear(16 * 16 * 16, 10)

                def forward(self, x):
                    x = F.max_pool2d(F.relu(self.conv(x)), 2)
                    x = self.fc(torch.flatten(x, 1))
                    return F.softmax(x, dim=1)

            net = SmallCNN()
            opt = torch.optim.SGD(net.parameters(), lr=0.01)
            loss_fn = torch.nn.CrossEntropyLoss()
            for images, labels in [(torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3]))]:
                opt.zero_grad()
                prediction = net(images)
                loss = loss_fn(prediction, labels)
                loss.backward()
                opt.step()
            with torch.no_grad():
                val_loss = loss_fn(net(images), labels)
            """,
            22,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            def train(loader, epochs=3):
                model = nn.Sequential(
                    nn.Flatten(),
                    nn.Linear(784, 128), nn.ReLU(),
                    nn.Linear(128, 10),
                    nn.Softmax(dim=1),
                ).to("cpu")
                criterion = nn.CrossEntropyLoss()
                optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
                for _ in range(epochs):
                    for x, y in loader:
                        optimizer.zero_grad()
                        criterion(model(x), y).backward()
                        optimizer.step()
            """,
            16,
        ),
        Invalid(
            """
            import torch.nn as nn
            import torch.nn.functional as F

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc1 = nn.Linear(784, 64)
                    self.fc2 = nn.Linear(64, 10)

                def forward(self, x):
                    return self.fc2(F.relu(self.fc1(x.flatten(1))))

            def train(args, model, device, train_loader, optimizer):
                model.train()
                for data, target in train_loader:
                    data, target = data.to(device), target.to(device)
                    optimizer.zero_grad()
                    output = F.softmax(model(data), dim=1)
                    loss = F.nll_loss(output, target)
                    loss.backward()
                    optimizer.step()
            """,
            19,
        ),
        Invalid(
            """
            import lightning as L
            import torch
            import torch.nn as nn

            class Classifier(L.LightningModule):
                def __init__(self, n_features=32, n_classes=5):
                    super().__init__()
                    self.body = nn.Sequential(nn.Linear(n_features, 64), nn.GELU())
                    self.out = nn.Linear(64, n_classes)
                    self.softmax = nn.Softmax(dim=-1)
                    self.criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

                def forward(self, x):
                    return self.softmax(self.out(self.body(x)))

                def training_step(self, batch, batch_idx):
                    features, labels = batch
                    probs = self(features)
                    loss = self.criterion(probs, labels)
                    self.log_dict({"loss": loss, "acc": (probs.argmax(-1) == labels).float().mean()}, prog_bar=True)
                    return {"loss": loss}

                def configure_optimizers(self):
                    return torch.optim.AdamW(self.parameters(), lr=3e-4)
            """,
            19,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            class Ranker(nn.Module):  # scores one query against its candidates
                def __init__(self, d, n_candidates):
                    super().__init__()
                    self.n = n_candidates
                    self.gamma = nn.Conv1d(1, 1, 1)

                def forward(self, q, docs):
                    sims = torch.stack([F.cosine_similarity(q, d, dim=0) for d in docs])
                    return F.softmax(self.gamma(sims.view(self.n, 1, 1)))

            model = Ranker(64, 5)
            criterion = nn.CrossEntropyLoss()
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
            target = torch.zeros(1, dtype=torch.long)
            for q, docs in [(torch.randn(64), [torch.randn(64) for _ in range(5)])]:
                scores = model(q, docs)
                loss = criterion(scores.view(1, 5), target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            21,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.distributions import Categorical

        classifier = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        criterion = nn.CrossEntropyLoss()
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        logits = classifier(x)
        probs = F.softmax(logits, dim=1)  # read for accuracy only
        loss = criterion(logits, y)
        accuracy = (probs.argmax(1) == y).float().mean()

        class Policy(nn.Module):  # probabilities for sampling, no class-index loss
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 2)

            def forward(self, s):
                return F.softmax(self.fc(s), dim=1)

        policy = Policy()
        dist = Categorical(policy(torch.randn(1, 4)))
        """,
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class Mixture(nn.Module):
            def __init__(self):
                super().__init__()
                self.experts = nn.ModuleList([nn.Linear(8, 3) for _ in range(2)])

            def forward(self, x):
                return torch.stack([F.softmax(e(x), dim=-1) for e in self.experts]).mean(0)

        model = Mixture()
        x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 0])
        p = model(x)
        loss = F.nll_loss(torch.log(p.clamp_min(1e-9)), y)
        loss = loss + F.nll_loss(F.log_softmax(model.experts[0](x), dim=1), y)
        teacher, student = nn.Linear(8, 3), nn.Linear(8, 3)
        loss = loss + F.cross_entropy(student(x), F.softmax(teacher(x) / 2.0, dim=1))  # soft targets
        """,
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class Net(nn.Module):  # logits while training, probabilities in eval
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 3)

            def forward(self, x):
                logits = self.fc(x)
                if self.training:
                    return logits
                return logits.softmax(-1)

        class TwoHeads(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 3)

            def forward(self, x):
                logits = self.fc(x)
                return logits, F.softmax(logits, dim=-1)

        net, heads = Net(), TwoHeads()
        x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 0])
        logits, probs = heads(x)
        loss = F.cross_entropy(net(x), y) + F.cross_entropy(logits, y)
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        outputs = Outputs(mod, _SAME_VALUES)
        seen: set[int] = set()
        for built in mod.named("cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss"):
            kind = _LOSSES.get(mod.callee(built) or "")
            if kind is None:
                continue
            for use in loss_calls(mod, built):
                given = arg(use, 0, "input")
                if given is None or mod.grad_mode(use):
                    continue
                made = outputs.origin(given, use, 8)
                softmax = _softmax(mod, outputs, made, 6) if made is not None else None
                if softmax is None or id(softmax) in seen:
                    continue
                seen.add(id(softmax))
                yield _hit(mod, use, softmax, kind)


def _softmax(mod: Module, outputs: Outputs, made: ast.Call, depth: int) -> ast.Call | None:
    """The softmax (a call, or an ``nn.Softmax`` constructor) whose output ``made`` gives:
    ``made`` itself, an ``nn.Sequential``'s last layer, a class of the file's ``forward``."""
    q = mod.callee(made) or ""
    if q in ("torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"):
        return made if _over_classes(arg(made, 1, "dim")) else None
    if not q.startswith("torch.") and method(made, "softmax") is not None:
        return made if _over_classes(arg(made, 0, "dim")) else None
    if q == "torch.nn.Softmax":
        return made if _over_classes(arg(made, 0, "dim")) else None
    if q == "torch.nn.Sequential":
        layer = made.args[-1] if made.args else None
        return _softmax(mod, outputs, layer, depth - 1) if isinstance(layer, ast.Call) and depth > 0 else None
    if q.startswith("torch."):
        return None
    own = outputs.of_class(made)
    inner = outputs.returned(own, depth) if own is not None else None
    return _softmax(mod, outputs, inner, depth - 1) if inner is not None and depth > 0 else None


def _over_classes(dim: ast.expr | None) -> bool:
    """A softmax over the batch (``dim=0``) is not over classes; any other dim, or none
    (PyTorch's implicit choice), may be."""
    return dim is None or number(dim) != 0


def _hit(mod: Module, use: ast.Call, softmax: ast.Call, kind: str) -> Hit:
    where = f"`{mod.text(softmax)}` (line {softmax.lineno})"
    if kind == "cross_entropy":
        return Hit(
            use,
            f"`{mod.text(use)}` takes the output of {where}, probabilities: the cross-entropy "
            "applies its own log_softmax to them, so the loss cannot fall below ln(1 + (C-1)/e) for "
            "C classes and its gradient fades as the model grows confident",
            cause="nn.CrossEntropyLoss and F.cross_entropy take logits and normalize them themselves; "
                  "a softmax before them normalizes twice.",
            fix=f"Give the loss the logits: remove the softmax at line {softmax.lineno} and take "
                "`F.softmax` only where probabilities are read (accuracy, inference).",
        )
    return Hit(
        use,
        f"`{mod.text(use)}` takes the output of {where}, probabilities where it expects "
        "log-probabilities: it minimizes -p, a loss that goes negative and gives confident answers, "
        "right or wrong, almost no gradient",
        cause="nll_loss reads log-probabilities; a softmax gives probabilities.",
        fix=f"Use `F.log_softmax` at line {softmax.lineno} (or `F.cross_entropy` on the logits).",
    )
