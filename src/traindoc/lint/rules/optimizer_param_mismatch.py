"""optimizer-param-mismatch: the optimizer is built before the model's parameters are replaced."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, dotted, truth
from traindoc.lint._models import COPIES, construction, parameter_owners
from traindoc.lint._nodes import arg, kwarg
from traindoc.lint._values import value_of
from traindoc.lint.rules._common import Hit, Invalid

# Calls that register new parameter objects in place of a module's own, and what they make.
REPLACERS = {
    "parallelize_module": "DTensors (tensor parallelism)",
    "fully_shard": "DTensor shards (FSDP2)",
    "FullyShardedDataParallel": "flattened FlatParameters (FSDP)",
    "FSDP": "flattened FlatParameters (FSDP)",
}
# How a loop over a module's children is written: the module is the receiver or the argument.
_CHILDREN = frozenset({"children", "modules", "values", "items", "named_children", "named_modules"})
# Calls whose items are the items of their first argument (`next(iter(model.layers))`).
_PASS_ITEMS = frozenset({"enumerate", "zip", "reversed", "list", "tuple", "sorted", "iter", "next"})


class OptimizerParamMismatch:
    """An optimizer is built from ``model.parameters()`` and afterwards, before it steps, the
    model's parameters are replaced by new tensors: ``parallelize_module``, ``fully_shard``
    (of the model or of a submodule, also in a loop over its blocks) or FSDP1's wrapper
    (unless ``use_orig_params=True``) register new parameter objects; ``load_state_dict(...,
    assign=True)`` and ``to_empty()`` swap them; a new model bound to the same name
    (``model = Net()`` again, ``copy.deepcopy``) is another set. The optimizer keeps the old
    tensors, which get no gradient: step() changes nothing the model uses. Quiet when the
    optimizer is built again after the replacement, when no step of it follows, and for what
    keeps the parameters (``.to()``, DDP, ``torch.compile``).
    """

    id: ClassVar[str] = "optimizer-param-mismatch"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch
            import torch.nn.functional as F
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            mesh = init_device_mesh("cuda", (8,))
            mlp = FeedForward(dim=1024, hidden=4096).cuda()
            opt = torch.optim.AdamW(mlp.parameters(), lr=3e-4)
            mlp = parallelize_module(mlp, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})

            for step in range(1000):
                x, y = next_batch(step)
                F.mse_loss(mlp(x), y).backward()
                opt.step()
                opt.zero_grad()
            """,
            8,
        ),
        Invalid(
            """
            import torch
            from torch.distributed.fsdp import fully_shard

            class Trainer:
                def __init__(self, cfg):
                    self.model = Transformer(cfg)
                    self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, fused=True)
                    for block in self.model.layers:
                        fully_shard(block, reshard_after_forward=True)
                    fully_shard(self.model)

                def train_step(self, batch):
                    loss = self.model(batch["input_ids"], labels=batch["labels"]).loss
                    loss.backward()
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
                    return loss.detach()
            """,
            7,
        ),
        Invalid(
            """
            import torch
            from torch.distributed.fsdp import FullyShardedDataParallel

            def main(rank, args):
                net = build_model(args).to(rank)
                optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
                net = FullyShardedDataParallel(net, auto_wrap_policy=policy, device_id=rank)
                for epoch in range(args.epochs):
                    for x, y in loader:
                        optimizer.zero_grad()
                        loss = criterion(net(x), y)
                        loss.backward()
                        optimizer.step()
            """,
            6,
        ),
        Invalid(
            """
            import torch
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            def apply_tp(model, tp_mesh):
                for block in model.blocks:
                    parallelize_module(block.mlp, tp_mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})

            def main(cfg, mesh):
                model = Transformer(cfg)
                optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
                apply_tp(model, mesh["tp"])
                for batch in loader:
                    model(batch).loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            10,
        ),
        Invalid(
            """
            import copy
            import torch

            model = ConvNet()
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            if args.pretrained:
                model = copy.deepcopy(teacher)
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            """,
            5,
        ),
        Invalid(
            """
            import torch

            with torch.device("meta"):
                model = GPT(config)
            optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
            model.to_empty(device="cuda")
            model.load_state_dict(torch.load(ckpt_path, weights_only=True), assign=True)
            for it in range(max_iters):
                _, loss = model(*get_batch("train"))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            """,
            5,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mlp = FeedForward(dim=1024, hidden=4096).cuda()
        mlp = parallelize_module(mlp, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        opt = torch.optim.AdamW(mlp.parameters(), lr=3e-4)
        for step in range(1000):
            loss_fn(mlp(batch(step))).backward()
            opt.step()
            opt.zero_grad()
        """,
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = ResNet50().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model = DDP(model, device_ids=[local_rank])
        model = torch.compile(model)
        model = model.to(memory_format=torch.channels_last)
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        """,
        """
        import torch
        from torch.distributed.fsdp import fully_shard

        class Trainer:
            def __init__(self, cfg):
                self.model = Transformer(cfg)
                self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)
                if cfg.shard:
                    for block in self.model.layers:
                        fully_shard(block)
                    fully_shard(self.model)
                    self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)

            def train_step(self, batch):
                self.model(batch).loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()
        """,
        """
        import torch

        model = Net()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        torch.save(model.state_dict(), "net.pt")

        model = Net()
        model.load_state_dict(torch.load("net.pt"), assign=True)
        evaluate(model, test_loader)
        """,
        """
        import torch

        def finetune_head(backbone, loader):
            model = Classifier(backbone)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            model = Classifier(backbone)  # a fresh copy for the baseline, evaluated untrained
            return evaluate(model, loader)

        def train(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
        """,
        """
        import torch
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        net = build_model(args)
        optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr)
        net = FSDP(net, use_orig_params=True)
        for x, y in loader:
            optimizer.zero_grad()
            criterion(net(x), y).backward()
            optimizer.step()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        for call in mod.constructors():
            if mod.kind_of_call(call) != "optimizer":
                continue
            name = _bound_to(mod, call)
            params = call.args[0] if call.args else kwarg(call, "params")
            if name is None or params is None:
                continue
            owners = {d: r for r in parameter_owners(mod, params, call, 2) if (d := dotted(r)) and d != "self"}
            if not owners:
                continue
            scope = mod.scope(call)
            replaced = _replacement(mod, scope, call, owners)
            if replaced is None:
                continue
            at, owner, what = replaced
            step = _step_after(mod, scope, name, at)
            if step is None:
                continue
            yield Hit(
                call,
                f"`{name}` is built from `{owner}.parameters()` (line {call.lineno}) before "
                f"`{_shown(mod, at)}` (line {at.lineno}) replaces them with {what}: "
                f"`{name}.step()` (line {step.lineno}) updates tensors the model no longer uses, "
                "and the model never trains",
                cause="The optimizer holds the parameter objects that existed when it was built; the "
                f"call at line {at.lineno} registers new ones in the model, which get the gradients "
                "while the old ones get none.",
                fix=f"Build `{name}` after line {at.lineno}, from the model as it trains "
                f"(`{owner}.parameters()` once it is sharded, wrapped or re-created).",
            )


def _shown(mod: Module, node: ast.Call | ast.stmt) -> str:
    """A replacing call as ``parallelize_module(tp_model, ...)``; an assignment as written."""
    if isinstance(node, ast.Call) and (node.args or node.keywords):
        first = node.args[0] if node.args else node.keywords[0].value
        more = ", ..." if len(node.args) + len(node.keywords) > 1 else ""
        return f"{mod.text(node.func, 40)}({mod.text(first, 30)}{more})"
    return mod.text(node, 60)


def _bound_to(mod: Module, call: ast.Call) -> str | None:
    """The name an optimizer built by ``call`` is assigned to (``opt``, ``self.optimizer``)."""
    parent = mod.parent.get(call)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is call:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if len(targets) == 1:
            return dotted(targets[0])
    return None


def _replacement(mod: Module, scope: Scope, built: ast.Call,
                 owners: dict[str, ast.expr]) -> tuple[ast.Call | ast.stmt, str, str] | None:
    """The first call or assignment after ``built`` in ``scope`` that replaces the parameters
    of one of ``owners``, there or in a function of the file it calls (``apply_tp(model,
    mesh)``): (the node in ``scope``, the owner, what the parameters become)."""
    later = [c for c in scope.calls if c.lineno > built.lineno]
    found = _replacing_call(mod, later, {o: o for o in owners})
    if found is not None:
        return found
    for site in later:
        inner = _in_helper(mod, site, scope, {o: o for o in owners}, 3)
        if inner is not None:
            return site, inner[1], inner[2]
    for owner, stmt, value in scope.assigns:
        if owner not in owners or stmt.lineno <= built.lineno or not isinstance(value, ast.Call):
            continue
        new = construction(mod, value, value)
        if new is None or new is construction(mod, owners[owner], built) or _wraps(mod, new, owner):
            continue
        return stmt, owner, f"those of another model (`{mod.text(value, 40)}`)"
    return None


def _replacing_call(mod: Module, calls: list[ast.Call], names: dict[str, str]) -> tuple[ast.Call, str, str] | None:
    """The first of ``calls`` that replaces the parameters of a module ``names`` maps (its name
    where the calls are) to an owner."""
    for call in calls:
        last = (mod.callee(call) or dotted(call.func) or "").split(".")[-1]
        if last in REPLACERS:
            target = call.args[0] if call.args else kwarg(call, "module")
            if last in ("FullyShardedDataParallel", "FSDP") and truth(mod, kwarg(call, "use_orig_params"), call) is True:
                continue
            owner = _owner_of(mod, target, names, call)
            if owner:
                return call, owner, REPLACERS[last]
        elif isinstance(call.func, ast.Attribute) and call.func.attr in ("to_empty", "load_state_dict"):
            if call.func.attr == "load_state_dict" and truth(mod, kwarg(call, "assign"), call) is not True:
                continue
            owner = _owner_of(mod, call.func.value, names, call)
            if owner:
                return call, owner, "new tensors (`assign=True` and `to_empty()` swap the parameter objects)"
    return None


def _in_helper(mod: Module, site: ast.Call, scope: Scope, names: dict[str, str],
               depth: int) -> tuple[ast.Call, str, str] | None:
    """A replacing call in the function of the file ``site`` runs (and those it runs, ``depth``
    deep), the owners followed into it by the arguments ``site`` passes."""
    helper = mod.callee_scope(site)
    if helper is None or helper is scope:
        return None
    inner = _passed(mod, site, helper, scope, names)
    if not inner:
        return None
    found = _replacing_call(mod, helper.calls, inner)
    if found is None and depth > 1:
        found = next((f for c in helper.calls if (f := _in_helper(mod, c, helper, inner, depth - 1))), None)
    return found


def _passed(mod: Module, site: ast.Call, helper: Scope, scope: Scope, names: dict[str, str]) -> dict[str, str]:
    """The helper's names for the owners: the parameters ``site`` passes them (or a part of
    them) to, and the ``self.`` attributes a method of the same class shares."""
    fn = helper.node
    inner = {n: o for n, o in names.items() if n.startswith("self.") and helper.cls is not None and helper.cls == scope.cls}
    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
        if helper.cls is not None and params and params[0] in ("self", "cls"):
            params = params[1:]
        for i, name in enumerate(params):
            owner = _owner_of(mod, arg(site, i, name), names, site)
            if owner:
                inner[name] = owner
    return inner


def _wraps(mod: Module, call: ast.Call, owner: str) -> bool:
    """``call`` is handed the owner (``Wrapper(model)``, ``nn.Sequential(model, head)``): a
    container of its parameters, unless it copies them."""
    if (mod.callee(call) or "").split(".")[-1] in COPIES:
        return False
    return any(dotted(n) == owner for a in [*call.args, *(k.value for k in call.keywords)] for n in ast.walk(a))


def _owner_of(mod: Module, node: ast.AST | None, names: dict[str, str], at: ast.Call) -> str | None:
    """The owner ``node`` is, or is part of (``model.layers[3]``, a loop variable over
    ``model.layers``, ``model.layers.items()``), by its name where ``at`` is."""
    for _ in range(6):
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            text = dotted(node)
            if text in names:
                return names[text]
            node = node.value
        if isinstance(node, ast.Name):
            if node.id in names:
                return names[node.id]
            node = _loop_source(mod, node, at) or value_of(mod, node, at)  # `blocks = list(model.blocks)`
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CHILDREN:
            node = node.func.value
        elif isinstance(node, ast.Call) and node.args and (dotted(node.func) or "") in _PASS_ITEMS:
            node = node.args[0]
        else:
            return None
    return None


def _loop_source(mod: Module, name: ast.Name, at: ast.Call) -> ast.expr | None:
    """What a loop around ``at`` iterates over, when ``name`` is (part of) its target."""
    for a in mod.ancestors(at):
        if isinstance(a, (ast.For, ast.AsyncFor)):
            if any(isinstance(n, ast.Name) and n.id == name.id for n in ast.walk(a.target)):
                return a.iter
    return None


def _step_after(mod: Module, scope: Scope, name: str, at: ast.Call | ast.stmt) -> ast.Call | None:
    """A step of optimizer ``name`` that runs after ``at`` (later in ``scope``, or in another
    function of the file: a method that trains), with no new optimizer bound to ``name`` in
    between."""
    rebuilt = [c.lineno for c in mod.constructors() if mod.scope(c) is scope and c.lineno > at.lineno
               and mod.kind_of_call(c) == "optimizer" and _bound_to(mod, c) == name]

    def same(opt: str, where: Scope) -> bool:
        return opt == name or any(dotted(v) == name for _, v in where.values_of(opt))

    for site, step, opt in mod.steps_in(scope):
        if same(opt, scope) and site.lineno > at.lineno and not any(line < site.lineno for line in rebuilt):
            return step
    # A method that trains, run after the one that built it (not one it calls), steps an
    # attribute (`self.optimizer`) or a module-level optimizer: a local of another function
    # of the same name is another optimizer.
    shared = "." in name or scope is mod.scopes[0]
    if shared and not rebuilt:
        called = {id(helper) for _, helper in mod.helpers(scope)}
        for other in mod.scopes:
            if other is not scope and id(other) not in called:
                for step, opt in mod.optimizer_steps(other):
                    if same(opt, other):
                        return step
    return None
