"""target-not-detached: a model no optimizer holds is run outside no_grad into the loss."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Held, Models, Module, Scope, construction, dotted, frozen, method, names_in
from traindoc.lint.rules._common import Hit, Invalid

# What cuts a value's autograd history on the way to the loss.
CUTS = frozenset({"detach", "item", "tolist", "numpy"})


class TargetNotDetached:
    """A model that no optimizer of the file holds (a DQN's target network, a distillation
    teacher, an EMA copy), with parameters that still require grad, is called outside
    ``no_grad`` on data (not on a trained model's output) and its output reaches the loss handed
    to backward without ``.detach()``: every backward also runs through it and fills its
    ``.grad``, which nothing clears. Models are told apart by the call that built them (followed
    through names, a function's parameters, ``self`` attributes, ``.to()``, DDP), not by their
    names; a model is held when an optimizer of the file takes its parameters (``self.parameters()``
    holds every instance of the class and what its methods build) or when it is the ``model`` a
    ``transformers.Trainer`` subclass of the file is built with. Quiet when an optimizer's
    parameters cannot be followed, for a frozen model (``requires_grad_(False)``, a loop setting
    ``requires_grad = False``) and for a model fed by a trained one (a perceptual loss's network:
    gradients must flow through it).
    """

    id: ClassVar[str] = "target-not-detached"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            class QNet(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 2)

                def forward(self, x):
                    return self.fc(x)

            def train(q, q_target, memory, optimizer):
                for _ in range(10):
                    s, a, r, s_prime, done = memory.sample(32)
                    q_a = q(s).gather(1, a)
                    max_q_prime = q_target(s_prime).max(1)[0].unsqueeze(1)
                    target = r + 0.98 * max_q_prime * done
                    loss = F.smooth_l1_loss(q_a, target)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()

            q, q_target = QNet(), QNet()
            q_target.load_state_dict(q.state_dict())
            optimizer = torch.optim.Adam(q.parameters(), lr=5e-4)
            for episode in range(1000):
                train(q, q_target, memory, optimizer)
            """,
            17,
        ),
        Invalid(
            """
            import torch.nn.functional as F
            from transformers import AutoModelForSequenceClassification, Trainer

            class DistillationTrainer(Trainer):
                def __init__(self, *args, teacher_model=None, temperature=2.0, **kwargs):
                    super().__init__(*args, **kwargs)
                    self.teacher = teacher_model
                    self.teacher.eval()
                    self.temperature = temperature

                def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                    outputs = model(**inputs)
                    teacher_logits = self.teacher(**inputs).logits
                    t = self.temperature
                    kd = F.kl_div(F.log_softmax(outputs.logits / t, -1), F.softmax(teacher_logits / t, -1),
                                  reduction="batchmean")
                    loss = 0.5 * outputs.loss + 0.5 * kd * t * t
                    return (loss, outputs) if return_outputs else loss

            student = AutoModelForSequenceClassification.from_pretrained("distilbert-base-uncased", num_labels=2)
            teacher = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased", num_labels=2)
            trainer = DistillationTrainer(model=student, teacher_model=teacher, args=training_args,
                                          train_dataset=train_ds)
            trainer.train()
            """,
            13,
        ),
        Invalid(
            """
            import copy
            import torch
            import torch.nn.functional as F

            online = Encoder()
            target = copy.deepcopy(online)
            opt = torch.optim.SGD(online.parameters(), lr=0.05, momentum=0.9)
            for x1, x2 in loader:
                p = online(x1)
                z = target(x2)
                loss = 2 - 2 * F.cosine_similarity(p, z, dim=-1).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                with torch.no_grad():
                    for pt, po in zip(target.parameters(), online.parameters()):
                        pt.mul_(0.99).add_(po, alpha=0.01)
            """,
            10,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch
        import torch.nn.functional as F

        q, q_target = QNet(), QNet()
        q_target.load_state_dict(q.state_dict())
        optimizer = torch.optim.Adam(q.parameters(), lr=5e-4)
        for s, a, r, s_prime, done in replay:
            with torch.no_grad():
                target = r + 0.98 * q_target(s_prime).max(1)[0] * done
            loss = F.smooth_l1_loss(q(s).gather(1, a).squeeze(1), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        # DDPG: the target is detached where it meets the loss; the actor's loss runs the critic,
        # which its own optimizer holds
        """
        import torch
        import torch.nn.functional as F

        q, q_target, mu, mu_target = QNet(), QNet(), MuNet(), MuNet()
        q_optimizer = torch.optim.Adam(q.parameters(), lr=1e-3)
        mu_optimizer = torch.optim.Adam(mu.parameters(), lr=5e-4)
        for s, a, r, s_prime, done in replay:
            target = r + 0.99 * q_target(s_prime, mu_target(s_prime)) * done
            q_loss = F.smooth_l1_loss(q(s, a), target.detach())
            q_optimizer.zero_grad()
            q_loss.backward()
            q_optimizer.step()
            mu_loss = -q(s, mu(s)).mean()
            mu_optimizer.zero_grad()
            mu_loss.backward()
            mu_optimizer.step()
        """,
        # a frozen teacher; a perceptual network fed by the generator (gradients must cross it)
        """
        import torch
        import torch.nn.functional as F
        import torchvision

        teacher = Teacher()
        teacher.requires_grad_(False)
        vgg = torchvision.models.vgg16().features[:16]
        opt = torch.optim.Adam(student.parameters(), lr=1e-4)
        for x, y in loader:
            fake = student(x)
            loss = F.mse_loss(fake, teacher(x)) + F.mse_loss(vgg(fake), vgg(y))
            opt.zero_grad()
            loss.backward()
            opt.step()
        """,
        # each network owns its optimizer: a target built from the same class is held by one
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class QNet(nn.Module):
            def __init__(self, lr):
                super().__init__()
                self.fc = nn.Linear(4, 1)
                self.optimizer = torch.optim.Adam(self.parameters(), lr=lr)

            def forward(self, x):
                return self.fc(x)

            def train_net(self, target, x):
                loss = F.smooth_l1_loss(self.forward(x), target)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()

        q, q_target = QNet(1e-3), QNet(1e-3)
        for x, r in replay:
            q.train_net(r + 0.99 * q_target(x), x)
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        models = Models(mod)
        held = Held.of(models)
        if held is None:
            return
        for scope in mod.scopes:
            if not scope.trained:
                continue
            live = _live_names(mod, scope)
            if not _trains_a_model(models, scope, live, held):
                continue  # gradients of an unheld model alone (a gradient check) are the point
            shown: set[int] = set()
            for call in scope.calls:
                if mod.grad_mode(call) or not isinstance(call.func, (ast.Name, ast.Attribute)):
                    continue
                built = models.built(call.func, call)
                if built is None or id(built) in shown or held.holds(mod, built) or frozen(models, built):
                    continue
                if not _reaches_loss(mod, scope, call, live) or _fed_by_held(models, scope, call, held):
                    continue
                shown.add(id(built))
                name = mod.text(call.func, 40)
                yield Hit(
                    call,
                    f"`{name}` (built at line {built.lineno}) is held by no optimizer here, and its output "
                    f"`{mod.text(call, 50)}` reaches the loss outside `torch.no_grad()` and without "
                    f"`.detach()`: every backward also runs through `{name}` and fills its `.grad`, which "
                    "nothing clears",
                    cause="A target network, teacher or EMA copy is meant to give fixed targets; called with "
                    "autograd on, its output carries a graph back to its own parameters, so backward "
                    "computes (and keeps) gradients nobody uses, in time and memory.",
                    fix=f"Compute `{mod.text(call, 50)}` under `with torch.no_grad():` (or `.detach()` its "
                    f"output), or freeze it once: `{name}.requires_grad_(False)`.",
                )


def _live_names(mod: Module, scope: Scope) -> set[str]:
    """Names the loss is computed from with autograd on: followed through assignments made
    outside ``no_grad``, never through ``.detach()``, ``.item()`` or ``.data``."""
    def attached(_: str, stmt: ast.stmt, value: object) -> set[str]:
        return set() if mod.grad_mode(stmt) or not isinstance(value, ast.expr) else _attached_names(value)

    return scope.closure(scope.trained, attached)


def _attached_names(node: ast.AST) -> set[str]:
    """The names a value is computed from, as data: not through a cut, and not the model a call
    runs (``net(x)`` is computed from ``x``; ``net`` is followed as a model, not as a value)."""
    if method(node, *CUTS) is not None or (isinstance(node, ast.Attribute) and node.attr == "data"):
        return set()
    if isinstance(node, ast.Name):
        return {node.id}
    children: list[ast.AST] = list(ast.iter_child_nodes(node))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        children.remove(node.func)
    return {n for child in children for n in _attached_names(child)}


def _reaches_loss(mod: Module, scope: Scope, call: ast.Call, live: set[str]) -> bool:
    """The call's output is part of the loss: it stands, not cut off by ``.detach()``, in the
    value of a name the loss is computed from, in a backward's loss or in a loss function's
    return."""
    node: ast.AST = call
    up = mod.parent.get(node)
    while up is not None and not isinstance(up, ast.stmt):
        if isinstance(up, ast.Attribute) and up.value is node and (up.attr in CUTS or up.attr == "data"):
            return False
        node, up = up, mod.parent.get(up)
    if isinstance(up, ast.Assign):
        return any(n in live for t in up.targets for n in names_in(t))
    if isinstance(up, ast.AugAssign):
        return dotted(up.target) in live
    if isinstance(up, ast.Return):
        return bool(scope.trained)
    return any(b.call is call or mod.inside(call, b.call) for b in scope.backwards)


def _trains_a_model(models: Models, scope: Scope, live: set[str], held: Held) -> bool:
    """The loss also runs a model that trains: a held one, or one the function is handed
    (``compute_loss(self, model, inputs)``: the Trainer's own)."""
    mod = models.mod
    fn = scope.node
    params = {a.arg for a in fn.args.args} if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else set()
    for call in scope.calls:
        if not isinstance(call.func, (ast.Name, ast.Attribute)) or not _reaches_loss(mod, scope, call, live):
            continue
        if isinstance(call.func, ast.Name) and call.func.id in params and models.built(call.func, call) is None:
            return True
        built = construction(mod, call.func, call)
        if built is not None and held.holds(mod, built):
            return True
    return False


def _fed_by_held(models: Models, scope: Scope, call: ast.Call, held: Held) -> bool:
    """An argument of the call is computed from a held model's output (``vgg(generator(z))``):
    the gradients the trained model needs flow through the call."""
    mod = models.mod
    names = mod.depends(scope, {n for a in [*call.args, *(k.value for k in call.keywords)] for n in names_in(a)})
    exprs: list[ast.AST] = [*call.args, *(k.value for k in call.keywords)]
    exprs += [v for n in names for _, v in scope.values_of(n)]
    for expr in exprs:
        for inner in ast.walk(expr):
            if isinstance(inner, ast.Call) and isinstance(inner.func, (ast.Name, ast.Attribute)):
                built = construction(mod, inner.func, inner)
                if built is not None and held.holds(mod, built):
                    return True
    return False
