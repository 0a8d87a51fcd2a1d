"""Does a module behave the same in train and eval mode? Answered from the source that builds it.

``mode_free(mod, "model")`` is True only when every piece of ``model`` is known: it is built in
this file (``model = Net(...).to(device)``, ``model = nn.Sequential(nn.Linear(...), ...)``) from
``torch.nn`` layers that have no train-mode behaviour (no dropout, no running statistics) and
classes of this file, or of a sibling module it imports whole (``models.Net()``), made of such
layers. Anything else (a torchvision or timm network, a class
from another package, a layer with ``dropout=``, ``F.dropout`` or ``self.training`` in a
forward) is not known to be mode free, so rules about ``.eval()`` keep judging it.
"""

from __future__ import annotations

import ast

from traindoc.lint._flow import Module
from traindoc.lint._nodes import dotted, method

# torch.nn layers whose forward is the same in train and eval mode.
MODE_FREE_LAYERS = frozenset(
    "Linear Bilinear LazyLinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d "
    "Embedding EmbeddingBag LayerNorm GroupNorm RMSNorm LocalResponseNorm Identity Flatten Unflatten "
    "ReLU ReLU6 LeakyReLU PReLU ELU SELU CELU GELU SiLU Mish Tanh Sigmoid Hardtanh Hardswish "
    "Hardsigmoid Softplus Softsign Softmax LogSoftmax Softmin Tanhshrink Threshold GLU "
    "MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d AdaptiveAvgPool2d "
    "AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d Upsample PixelShuffle "
    "ZeroPad1d ZeroPad2d ConstantPad1d ConstantPad2d ReflectionPad1d ReflectionPad2d ReplicationPad2d "
    "Sequential ModuleList ModuleDict ParameterList ParameterDict Parameter RNN LSTM GRU RNNCell "
    "LSTMCell GRUCell".split()
)
# Calls on the way from a constructor to the name: `Net(...).to(device).float()`.
_CHAINED = ("to", "cuda", "cpu", "float", "double", "train", "requires_grad_")
# Calls that return the module they are called on: `model.to(device).train()`.
_MOVES = ("to", "cuda", "cpu", "float", "double", "half", "bfloat16")
_MODE_WORDS = ("dropout", "training", "batchnorm", "instancenorm", "syncbatchnorm")


def mode_free(mod: Module, name: str) -> bool:
    """``name`` is built in this file, only from layers without train-mode behaviour."""
    built = mod.built.get(name, [])
    return len(built) == 1 and _free(mod, _unchained(built[0]), set())


def mode_switch(call: ast.Call) -> tuple[str, str] | None:
    """The module whose mode ``call`` sets, by name ("" when it has none: ``models["g"]``), and
    to what: "eval" for ``.eval()`` and ``.train(False)``, "train" for ``.train()`` and
    ``.train(True)``, "either" for ``.train(flag)`` (a mode read from a name). The name is read
    through calls that return the module itself (``model.to(device).train()``) and DDP's
    ``.module``. None for any other call."""
    receiver = method(call, "eval", "train")
    if receiver is None:
        return None
    while isinstance(receiver, ast.Call) and method(receiver, *_MOVES) is not None:
        receiver = method(receiver, *_MOVES)
    name = (dotted(receiver) or "").removesuffix(".module")
    assert isinstance(call.func, ast.Attribute)
    if call.func.attr == "eval":
        return (name, "eval") if not call.args else None
    flag = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "mode"), None)
    if flag is None:
        return name, "train"
    if isinstance(flag, ast.Constant):
        return name, "train" if flag.value else "eval"
    return name, "either"


def sets_train_mode(body: list[ast.stmt], model: str) -> bool:
    """The no_grad block itself calls ``model.train()`` before running the model: train mode
    there is deliberate (Monte Carlo dropout samples sub-networks with dropout on). A
    ``model.train()`` after the passes only restores the mode for training."""
    first_train = first_run = None
    for stmt in body:
        for n in ast.walk(stmt):
            if not isinstance(n, ast.Call):
                continue
            where = (n.lineno, n.col_offset)
            if dotted(method(n, "train")) == model and not (
                n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value is False
            ):
                first_train = min(first_train or where, where)
            elif dotted(n.func) == model:
                first_run = min(first_run or where, where)
    return first_train is not None and (first_run is None or first_train < first_run)


def _unchained(call: ast.expr) -> ast.expr:
    while (
        isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
        and call.func.attr in _CHAINED and isinstance(call.func.value, ast.Call)
    ):
        call = call.func.value
    return call


def _free(mod: Module, call: ast.expr, seen: set[str]) -> bool:
    """The module ``call`` builds (a torch.nn layer or a class of this file) is mode free."""
    if not isinstance(call, ast.Call):
        return False
    if any(kw.arg == "dropout" and not _zero(kw.value) for kw in call.keywords):
        return False
    q = mod.qualname(call.func) or ""
    last = q.rpartition(".")[2]
    if q.startswith("torch.nn.") and q.count(".") == 2:
        return last in MODE_FREE_LAYERS and all(
            _free(mod, a, seen) for a in call.args if isinstance(a, ast.Call) and _is_module_call(mod, a)
        )
    classes = {s.cls for s in mod.scopes if s.cls}
    if isinstance(call.func, ast.Name) and call.func.id in classes and call.func.id not in mod.aliases:
        return _class_free(mod, call.func.id, seen)
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.attr in classes and (
        func.attr in mod.sibling_modules.get(func.value.id, ())
    ):  # ``models.Net()`` with ``import models``: the sibling's class, appended to this tree
        return _class_free(mod, func.attr, seen)
    return False


def _is_module_call(mod: Module, call: ast.Call) -> bool:
    """A call that builds a layer (a capitalized name: ``nn.Linear(...)``, ``Block(...)``), not
    one of torch's tensors (``Variable(torch.zeros(...))``, ``torch.Tensor(...)``)."""
    q = mod.qualname(call.func) or ""
    if q.startswith("torch.") and not q.startswith("torch.nn."):
        return False
    return (dotted(call.func) or "").rpartition(".")[2][:1].isupper()


def _class_free(mod: Module, cls: str, seen: set[str]) -> bool:
    """Every layer the methods of class ``cls`` build is mode free, and none reads the mode."""
    if cls in seen:
        return True
    seen.add(cls)
    for scope in mod.scopes:
        if scope.cls != cls:
            continue
        for node in ast.walk(scope.node):
            if isinstance(node, ast.Attribute) and node.attr.lower() in _MODE_WORDS:
                return False  # F.dropout(...), self.training, nn.BatchNorm2d via an alias
            if isinstance(node, ast.Name) and node.id.lower() in _MODE_WORDS:
                return False
            if isinstance(node, ast.Call) and _is_module_call(mod, node) and not _free(mod, node, seen):
                return False
    return True


def _zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in (0, 0.0)
