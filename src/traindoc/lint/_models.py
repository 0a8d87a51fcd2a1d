"""Which calls of a file build a model, and which of those models its optimizers hold.

A model is known by the call that built it (``QNet()``, ``AutoModel.from_pretrained(...)``,
``copy.deepcopy(model)``, a factory function of the file), followed from a name through
assignments, a function's parameters, ``self`` attributes, methods that return the module
itself (``.to()``, ``.eval()``) and wrappers that share its parameters (DDP, ``torch.compile``).
Two names are one model when they lead to one such call.
"""

from __future__ import annotations

import ast

from traindoc.lint._flow import Module
from traindoc.lint._nodes import dotted, kwarg, method
from traindoc.lint._values import value_of

# Methods that return the module they are called on.
RETURNS_SELF = frozenset({"to", "cuda", "cpu", "float", "half", "bfloat16", "double", "train", "eval", "requires_grad_"})
# Wrappers that share the parameters of the module they wrap.
WRAPPERS = frozenset({"DistributedDataParallel", "DDP", "DataParallel", "FullyShardedDataParallel", "FSDP", "compile"})
# Functions that build a model (besides class constructors).
BUILDERS = frozenset({"from_pretrained", "create_model", "deepcopy"})
# Builders whose model has parameters of its own: not a container of the model they are given.
COPIES = frozenset({"deepcopy", "AveragedModel"})


class Models:
    """Which calls of the file build a model: the call a name's value comes from (through
    ``.to()``, ``.eval()``, DDP, ``torch.compile``), kept when it builds a module (a module class
    of the file, a ``torch.nn`` layer, ``from_pretrained``, ``timm.create_model``, a torchvision
    model, ``AveragedModel``, ``copy.deepcopy`` of a model) or when the file uses its result as
    one (``.parameters()``, ``.state_dict()``, ``.load_state_dict()``, ``.eval()`` on it)."""

    USES = ("parameters", "named_parameters", "state_dict", "load_state_dict", "eval", "requires_grad_", "modules")

    def __init__(self, mod: Module) -> None:
        self.mod = mod
        self.defs = class_defs(mod)
        self.classes = module_classes(self.defs)
        self.used: set[int] = set()
        for call in mod.named(*self.USES):
            receiver = method(call, *self.USES)
            found = construction(mod, receiver, call) if receiver is not None else None
            if found is not None:
                self.used.add(id(found))

    def built(self, node: ast.expr, at: ast.AST) -> ast.Call | None:
        found = construction(self.mod, node, at)
        return found if found is not None and (id(found) in self.used or self._builds(found)) else None

    def _builds(self, call: ast.Call) -> bool:
        q = self.mod.callee(call) or ""
        last = q.split(".")[-1]
        if isinstance(call.func, ast.Name) and call.func.id in self.classes:
            return True
        if q.startswith("torch.nn.") and last[:1].isupper() and not last.endswith("Loss"):
            return True
        if q == "copy.deepcopy" and call.args:
            return self.built(call.args[0], call) is not None
        made = factory(self.mod, call)
        if made is not None and made is not call and factory(self.mod, made) is not made:
            return self.built(made, made) is not None
        return last in ("from_pretrained", "create_model", "AveragedModel") or q.startswith("torchvision.models.")


def construction(mod: Module, node: ast.expr, at: ast.AST) -> ast.Call | None:
    """The call a name's value comes from, through methods that return the module itself and
    wrappers that share its parameters; None when the file does not show it."""
    value = value_of(mod, node, at) if isinstance(node, (ast.Name, ast.Attribute)) else node
    for _ in range(4):
        if not isinstance(value, ast.Call):
            return None
        receiver = method(value, *RETURNS_SELF)
        last = (mod.callee(value) or dotted(value.func) or "").split(".")[-1]
        inner = receiver if receiver is not None else value.args[0] if last in WRAPPERS and value.args else None
        if inner is None:
            # a constructor (``Net(...)``, ``nn.Linear``), a model factory, or a function of the
            # file that returns one (each call a model of its own); any other call
            # (``accelerator.prepare``) may hand back a model built elsewhere: unknown
            return value if last[:1].isupper() or last in BUILDERS or factory(mod, value) else None
        value = value_of(mod, inner, value) if isinstance(inner, (ast.Name, ast.Attribute)) else inner
    return None


def factory(mod: Module, call: ast.Call) -> ast.Call | None:
    """The call a function of this file returns when ``call`` runs it and it has one return."""
    fn = mod.callee_scope(call)
    if fn is None or len(fn.returns) != 1:
        return None
    value = fn.returns[0].value
    return value if isinstance(value, ast.Call) else None


class Held:
    """The models the file's optimizers hold, by the call that built them (with the models a
    held submodule is part of: their output reaches held parameters); a class whose methods
    hand ``self.parameters()`` to an optimizer holds every instance; what a held model's class
    builds in its methods (its submodules) is held with it."""

    def __init__(self) -> None:
        self.built: set[int] = set()
        self.classes: set[str] = set()  # every instance held
        self.parts_of: set[str] = set()  # what these classes' methods build is held

    @classmethod
    def of(cls, models: Models) -> Held | None:
        """None when the file builds no optimizer (nor a Trainer subclass), or one whose
        parameters cannot be followed: what is held is then unknown."""
        mod = models.mod
        held = cls()
        optimizers = [c for c in mod.constructors() if mod.kind_of_call(c) == "optimizer"]
        for opt in optimizers:
            given = kwarg(opt, "params") or (opt.args[0] if opt.args else None)
            if given is None:
                return None
            found = parameter_owners(mod, given, opt, 3)
            if not found:
                return None  # tensors the file does not show the model of
            for receiver in found:
                if dotted(receiver) == "self":
                    owner = mod.scope(opt).cls
                    held.classes |= {owner} if owner else set()
                    held.parts_of |= {owner} if owner else set()
                    continue
                built = construction(mod, receiver, opt)
                if built is None:
                    return None
                held.add(models, built)
                if isinstance(receiver, ast.Attribute):  # model.fc.parameters(): model is partly held
                    whole = construction(mod, receiver.value, opt)
                    held.built |= {id(whole)} if whole is not None else set()
        trainers = trainer_models(models)
        for built in trainers:
            held.add(models, built)
        return held if optimizers or trainers else None

    def add(self, models: Models, built: ast.Call) -> None:
        self.built.add(id(built))
        name = dotted(built.func)
        if name in models.classes:
            self.parts_of.add(name)

    def holds(self, mod: Module, built: ast.Call, depth: int = 2) -> bool:
        # GPT(...) and GPT.from_pretrained(...) alike
        if id(built) in self.built or (dotted(built.func) or "").split(".")[0] in self.classes:
            return True
        if mod.scope(built).cls in self.parts_of:
            return True
        # nn.Sequential(backbone, head) with head held: its output reaches held parameters (a
        # copy, deepcopy(model) or AveragedModel(model), has parameters of its own)
        if (mod.callee(built) or "").split(".")[-1] in COPIES:
            return False
        parts = [n for a in [*built.args, *(k.value for k in built.keywords)] for n in ast.walk(a)
                 if isinstance(n, (ast.Name, ast.Attribute))]
        return depth > 0 and any(
            (part := construction(mod, n, built)) is not None and part is not built and self.holds(mod, part, depth - 1)
            for n in parts
        )


def parameter_owners(mod: Module, node: ast.expr, at: ast.AST, depth: int) -> list[ast.expr]:
    """The receivers of ``.parameters()`` / ``.named_parameters()`` an optimizer's argument is
    made from, through the names it reads (param groups, filtered lists)."""
    values: list[ast.AST] = [node]
    if isinstance(node, ast.Name):
        scope = mod.scope(at)
        found = scope.values_of(node.id) or mod.scopes[0].values_of(node.id)
        values = [v for _, v in found] or [value_of(mod, node, at) or node]
    elif isinstance(node, ast.Attribute):
        values = [value_of(mod, node, at) or node]
    out = []
    for value in values:
        out += [r for r in (method(n, "parameters", "named_parameters") for n in ast.walk(value)) if r is not None]
        if depth > 0:
            for n in ast.walk(value):
                if isinstance(n, ast.Name) and n is not node:
                    out += parameter_owners(mod, n, value if value is not node else at, depth - 1)
    return out


def trainer_models(models: Models) -> list[ast.Call]:
    """The models given to the file's ``transformers.Trainer`` subclasses (their ``model``)."""
    mod = models.mod
    subclasses = {
        c.name for c in models.defs.values()
        if any((mod.qualname(b) or "").split(".")[0] in ("transformers", "trl") for b in c.bases)
    }
    out = []
    for call in mod.calls:
        if isinstance(call.func, ast.Name) and call.func.id in subclasses:
            given = kwarg(call, "model") or (call.args[0] if call.args else None)
            built = construction(mod, given, call) if given is not None else None
            if built is not None:
                out.append(built)
    return out


def class_defs(mod: Module) -> dict[str, ast.ClassDef]:
    """The classes of the file that define methods, by name (found from the index's function
    scopes: a walk of the whole tree per file costs as much as the rest of a rule)."""
    out: dict[str, ast.ClassDef] = {}
    for scope in mod.scopes:
        owner = mod.parent.get(scope.node) if scope.cls else None
        if isinstance(owner, ast.ClassDef):
            out.setdefault(owner.name, owner)
    return out


def module_classes(classes: dict[str, ast.ClassDef]) -> set[str]:
    """Classes of this file that are modules: a base ending in ``Module`` (``nn.Module``,
    ``LightningModule``), ``PreTrainedModel``, or another such class of the file."""
    found: set[str] = set()
    for _ in range(3):
        for name, c in classes.items():
            bases = [dotted(b) or "" for b in c.bases]
            if any(b.endswith(("Module", "PreTrainedModel")) or b in found for b in bases):
                found.add(name)
    return found


def frozen(models: Models, built: ast.Call) -> bool:
    """``m.requires_grad_(False)``, or a loop over ``m.parameters()`` that sets
    ``requires_grad = False`` (or calls ``requires_grad_(False)``), anywhere in the file."""
    mod = models.mod
    for call in mod.named("requires_grad_"):
        flag = call.args[0] if call.args else kwarg(call, "requires_grad")
        receiver = method(call, "requires_grad_")
        if flag is not None and _false(flag) and receiver is not None \
                and construction(mod, receiver, call) is built:
            return True
    for call in mod.named("parameters", "named_parameters"):
        receiver = method(call, "parameters", "named_parameters")
        loop = mod.parent.get(call)
        while isinstance(loop, ast.Call):  # for _, p in enumerate(m.parameters())
            loop = mod.parent.get(loop)
        if not isinstance(loop, ast.For) or receiver is None:
            continue
        own = dotted(receiver) == "self" and mod.scope(call).cls == dotted(built.func)  # Vgg16 freezes itself
        if not own and construction(mod, receiver, call) is not built:
            continue
        for node in ast.walk(loop):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in node.targets
            ) and _false(node.value):
                return True
            if method(node, "requires_grad_") is not None and isinstance(node, ast.Call) and node.args \
                    and _false(node.args[0]):
                return True
    return False


def _false(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is False
