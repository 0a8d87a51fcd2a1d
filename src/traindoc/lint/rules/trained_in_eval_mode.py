"""trained-in-eval-mode: an evaluation's ``.eval()`` that nothing undoes before training goes on."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, dotted, method, mode_free, mode_switch
from traindoc.lint.rules._common import Hit, Invalid

_DEPTH = 3  # calls followed into this file's functions


class _Switch:
    """A call that sets the model's mode, seen from the training loop: ``site`` is the call in
    the loop's own code (the switch itself, or the helper call that runs it)."""

    def __init__(self, site: ast.Call, call: ast.Call, to_eval: bool) -> None:
        self.site, self.call, self.to_eval = site, call, to_eval


class TrainedInEvalMode:
    """The mode a training step runs in, followed through the loop that runs it: going back
    from the step's forward (or its backward) through the loop body before it, then around the
    loop (the end of the previous iteration), then through each enclosing loop and the code
    before it, and up to the one caller of a function, the last call that sets the trained
    model's mode decides. When that is ``model.eval()`` (or ``train(False)``), written in the
    loop or in a function of the file the loop calls (``validate(model)``, ``self.validate()``,
    a parameter bound to the model), the step trains in eval mode on every iteration after
    it: dropout off, BatchNorm frozen at its running statistics. Any ``.train()`` call on the
    model later in that path, conditional or not (``if training: model.train()``), counts as
    putting it back. An ``.eval()`` before the loops (training in eval mode from the first
    step, on purpose) is not judged, nor a model built in this file without dropout or
    running statistics (``mode_free``), nor one called through ``self`` inside its own class.
    """

    id: ClassVar[str] = "trained-in-eval-mode"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        # a course script: train() once before the epochs, inline validation in eval mode
        Invalid(
            """
            import torch
            import torch.nn as nn

            net = nn.Sequential(nn.Linear(12, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 4))
            optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
            net.train()
            for epoch in range(20):
                for inputs, labels in train_loader:
                    optimizer.zero_grad()
                    loss = criterion(net(inputs), labels)
                    loss.backward()
                    optimizer.step()
                net.eval()
                correct = 0
                for inputs, labels in valid_loader:
                    correct += (net(inputs).argmax(1) == labels).sum().item()
                print(epoch, correct)
            """,
            13,
        ),
        # a function loop with a periodic evaluation helper that returns in eval mode
        Invalid(
            """
            import torch

            @torch.no_grad()
            def evaluate(model, loader):
                model.eval()
                return sum(criterion(model(x), y).item() for x, y in loader) / len(loader)

            def train(model, optimizer, train_loader, val_loader, steps):
                model.train()
                for step, (x, y) in enumerate(train_loader):
                    loss = criterion(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    if step % 500 == 0:
                        print(step, evaluate(model, val_loader))
                    if step == steps:
                        break
            """,
            16,
        ),
        # a Trainer class validating every N iterations, mid-epoch; train() at the epoch's top
        Invalid(
            """
            import torch

            class Trainer:
                def __init__(self, model, optim, train_loader, val_loader, interval_validate):
                    self.model, self.optim = model, optim
                    self.train_loader, self.val_loader = train_loader, val_loader
                    self.interval_validate = interval_validate
                    self.iteration = 0

                def validate(self):
                    self.model.eval()
                    with torch.no_grad():
                        for data, target in self.val_loader:
                            self.metrics.update(self.model(data), target)

                def train_epoch(self):
                    self.model.train()
                    for data, target in self.train_loader:
                        if self.iteration % self.interval_validate == 0:
                            self.validate()
                        self.optim.zero_grad()
                        loss = cross_entropy2d(self.model(data), target)
                        loss.backward()
                        self.optim.step()
                        self.iteration += 1
            """,
            20,
        ),
        # a step loop calling test() on the global model; nothing ever calls train() again
        Invalid(
            """
            import torch
            from torchvision.models import resnet18

            model = resnet18(num_classes=10)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

            def test():
                model.eval()
                with torch.no_grad():
                    return objective(model(x_test), y_test).item()

            for i in range(max_steps):
                x, y = get_batch()
                optimizer.zero_grad()
                loss = objective(model(x), y)
                loss.backward()
                optimizer.step()
                if i % 100 == 0 and i != 0:
                    print("test", test())
            """,
            19,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        # train() at the top of each epoch, validation at its end
        """
        import torch

        for epoch in range(epochs):
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                val = sum(criterion(model(x), y).item() for x, y in val_loader)
        """,
        # the evaluation restores the mode it found
        """
        import torch

        class Trainer:
            def validate(self):
                training = self.model.training
                self.model.eval()
                with torch.no_grad():
                    for data, target in self.val_loader:
                        self.metrics.update(self.model(data), target)
                if training:
                    self.model.train()

            def train_epoch(self):
                self.model.train()
                for data, target in self.train_loader:
                    if self.iteration % self.interval_validate == 0:
                        self.validate()
                    self.optim.zero_grad()
                    self.loss_fn(self.model(data), target).backward()
                    self.optim.step()
        """,
        # built here from layers that act the same in both modes: eval mode changes nothing
        """
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = nn.Conv2d(3, 6, 5)
                self.pool = nn.MaxPool2d(2, 2)
                self.fc = nn.Linear(6 * 14 * 14, 10)

            def forward(self, x):
                return self.fc(self.pool(torch.relu(self.conv1(x))).flatten(1))

        net = Net()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
        net.train()
        for epoch in range(10):
            for inputs, labels in train_loader:
                optimizer.zero_grad()
                criterion(net(inputs), labels).backward()
                optimizer.step()
            net.eval()
            acc = sum((net(x).argmax(1) == y).sum().item() for x, y in valid_loader)
        """,
        # frozen statistics on purpose: eval mode from the first step, nothing in the loop
        """
        import torch

        probe.eval()
        opt = torch.optim.SGD(probe.head.parameters(), lr=0.1)
        for x, y in loader:
            loss = criterion(probe(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        """,
        # train() at the top of every iteration undoes the periodic evaluation
        """
        import torch

        def fit(model, opt, loader, val_loader):
            for step, (x, y) in enumerate(loader):
                model.train()
                loss = criterion(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if step % 200 == 0:
                    model.eval()
                    with torch.no_grad():
                        print(sum(criterion(model(a), b).item() for a, b in val_loader))
        """,
        # the configuration picks the mode: fine-tuning in train mode, or a probe on frozen features
        """
        import torch

        for epoch in range(start_epoch, args.epochs):
            if args.weights == "finetune":
                model.train()
            elif args.weights == "freeze":
                model.eval()
            for images, target in train_loader:
                loss = criterion(model(images), target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                top1 = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
        """,
        # the evaluation helper's parameter is the EMA copy it is handed, not the trained model
        """
        import torch
        from torch.optim.swa_utils import AveragedModel

        @torch.no_grad()
        def evaluate(model, loader):
            model.eval()
            return sum((model(x).argmax(1) == y).float().mean().item() for x, y in loader)

        ema = AveragedModel(model)
        model.train()
        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ema.update_parameters(model)
            if step % 100 == 0:
                print(step, evaluate(ema, val_loader))
        """,
        # a checkpoint taken mid-epoch in eval mode on the CPU, the mode put back in the same chain
        """
        import torch

        for e in range(epochs):
            transformer.train()
            for batch_id, (x, _) in enumerate(train_loader):
                optimizer.zero_grad()
                loss = criterion(transformer(x.to(device)), x)
                loss.backward()
                optimizer.step()
                if (batch_id + 1) % checkpoint_interval == 0:
                    transformer.eval().cpu()
                    torch.save(transformer.state_dict(), f"ckpt_{e}_{batch_id}.pth")
                    transformer.to(device).train()
        """,
        # only the BatchNorm layers are frozen; the model itself stays in train mode
        """
        import torch

        for epoch in range(epochs):
            model.train()
            model.backbone.apply(set_bn_eval)
            for x, y in loader:
                loss = criterion(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        models = mod.trained_models() - {"self"}
        seen: set[int] = set()
        for scope in mod.scopes:
            for backward in scope.backwards:
                model = _model_before(mod, scope, backward.call, models)
                if model is None or mode_free(mod, model):
                    continue
                found = _last_switch(mod, scope, backward.call, model)
                if found is None or not found.to_eval or id(found.site) in seen:
                    continue
                seen.add(id(found.site))
                via = "" if found.call is found.site else f" (it calls `{mod.text(found.call)}` at line {found.call.lineno})"
                yield Hit(
                    found.site,
                    f"`{mod.text(found.site)}` puts `{model}` in eval mode{via} and nothing puts it back "
                    f"before the training step at line {backward.call.lineno} runs again: every step "
                    "after it trains with dropout off and BatchNorm frozen at its running statistics",
                    cause="`.eval()` stays in effect until `.train()` is called; the `.train()` of this "
                    "loop sits before it runs again (before the epoch loop, or at the top of an epoch "
                    "while the evaluation runs mid-epoch), or is missing.",
                    fix=f"Call `{model}.train()` at the top of each training iteration, or restore the mode "
                    f"at the end of the evaluation (`was = {model}.training; {model}.eval(); ...; "
                    f"{model}.train(was)`).",
                )


def _model_before(mod: Module, scope: Scope, at: ast.Call, models: set[str]) -> str | None:
    """The trained model the step at ``at`` runs: the last call of one before it in ``scope``."""
    called = [c for c in scope.calls if c.lineno <= at.lineno and _runs(c) in models]
    return _runs(called[-1]) if called else None


def _runs(call: ast.Call) -> str | None:
    return dotted(method(call, "forward")) or dotted(call.func)


def _last_switch(mod: Module, scope: Scope, at: ast.AST, model: str) -> _Switch | None:
    """The last call that set ``model``'s mode before ``at`` runs again (see the class
    docstring). A step in a function with no loop around it goes on in its one caller, at
    the call, the model named as the caller names it."""
    tail: list[_Switch] = []  # switches that run after the step, deepest call first
    for _ in range(_DEPTH + 1):
        pos: ast.AST = at
        loops = [loop for loop in mod.loops_around(at) if mod.scope(loop) is scope]
        for loop in loops:
            switches = [s for s in _switches(mod, scope, loop, {model}) if s.site is not at]
            before = [s for s in switches if _before(s.site, pos)]
            if before:
                return _either(mod, before[-1], switches)
            tail += [s for s in switches if not _before(s.site, pos) and not mod.inside(s.site, pos)]
            if tail:
                return _either(mod, tail[-1], switches)  # the end of the previous iteration
            pos = loop
        if loops:
            return None  # nothing in the loops: the mode set before them holds from the first step
        switches = [s for s in _switches(mod, scope, None, {model}) if s.site is not at]
        before = [s for s in switches if _before(s.site, at)]
        if before:
            return _either(mod, before[-1], switches)  # the step's own function sets the mode first
        tail += [s for s in switches if not _before(s.site, at)]
        callers = mod.callers_of(scope)
        if len(callers) != 1:
            return None
        call = callers[0]
        model = _passed(call, scope, model)
        scope, at = mod.scope(call), call
    return None


def _passed(call: ast.Call, target: Scope, model: str) -> str:
    """How the caller names what ``target`` calls ``model``: the argument ``call`` binds to that
    parameter, or the same name (a global, ``self.model``)."""
    params, _ = _params(target)
    for i, arg in enumerate(call.args):
        if i < len(params) and params[i] == model:
            return dotted(arg) or model
    for kw in call.keywords:
        if kw.arg == model:
            return dotted(kw.value) or model
    return model


def _params(target: Scope) -> tuple[list[str], list[str]]:
    """The parameters of the function ``target`` that take positional arguments (a method's
    ``self`` left out), and its keyword-only ones."""
    node = target.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [], []
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    if target.cls is not None and params[:1] == ["self"]:
        params = params[1:]
    return params, [a.arg for a in node.args.kwonlyargs]


def _either(mod: Module, found: _Switch, switches: list[_Switch]) -> _Switch | None:
    """``found``, unless it puts the model in eval mode in one branch of an ``if`` whose other
    branch puts it in train mode (``if args.weights == 'finetune': model.train() elif
    'freeze': model.eval()``): a choice the configuration makes, not an evaluation left
    behind."""
    trains = [s.site for s in switches if not s.to_eval]
    for a in mod.ancestors(found.site) if found.to_eval else ():
        if isinstance(a, ast.If):
            other = a.orelse if any(mod.inside(found.site, b) for b in a.body) else a.body
            if any(mod.inside(t, b) for t in trains for b in other):
                return None
    return found


def _before(node: ast.AST, pos: ast.AST) -> bool:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0)) < (
        getattr(pos, "lineno", 0), getattr(pos, "col_offset", 0))


def _switches(mod: Module, scope: Scope, node: ast.AST | None, names: set[str],
              depth: int = _DEPTH) -> list[_Switch]:
    """The calls inside ``node`` of ``scope`` (all of it when None) that set the mode of
    ``names`` (the model, as ``scope`` names it), in source order, with the switches of the
    functions of this file they call in their place, ``depth`` calls deep."""
    out: list[_Switch] = []
    for call in mod.calls_in(scope, node) if names else ():
        to_eval = _sets(call, names)
        if to_eval is not None:
            out.append(_Switch(call, call, to_eval))
            continue
        target = mod.callee_scope(call) if depth > 0 else None
        if target is not None and target is not scope:
            inner = set().union(*(_bound(call, target, n) for n in names))
            out += [_Switch(call, s.call, s.to_eval) for s in _switches(mod, target, None, inner, depth - 1)]
    return out


def _bound(call: ast.Call, target: Scope, model: str) -> set[str]:
    """How the function ``target`` names ``model`` when ``call`` runs it: the same name (a
    global, ``self.model`` in a method of the same class) and the parameters it is passed to."""
    params, keywords = _params(target)
    # a parameter of the same name is whatever the call passes it (``evaluate(ema)``)
    names = set() if model.split(".")[0] in params + keywords else {model}
    for i, arg in enumerate(call.args):
        if i < len(params) and dotted(arg) == model:
            names.add(params[i])
    for kw in call.keywords:
        if kw.arg and dotted(kw.value) == model:
            names.add(kw.arg)
    return names


def _sets(call: ast.Call, names: set[str]) -> bool | None:
    """True when ``call`` puts one of ``names`` in eval mode, False when in train mode (a mode
    read from a flag counts as train: ``model.train(was)`` puts back what an evaluation found),
    None when it sets no mode of theirs."""
    found = mode_switch(call)
    if found is None or found[0] not in names:
        return None
    return found[1] == "eval"
