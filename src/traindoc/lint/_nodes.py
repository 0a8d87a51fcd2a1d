"""Small helpers on single AST nodes, shared by the lint analysis and the rules.

They read one expression (a dotted name, a call's arguments, a literal) and know nothing about
the file around it; ``_ast.Module`` does the following of names.
"""

from __future__ import annotations

import ast

OPTIMIZER_CLASSES = frozenset(
    "SGD Adam AdamW Adamax Adagrad Adadelta RMSprop NAdam RAdam Rprop ASGD LBFGS SparseAdam Muon "
    "Lion Adafactor AdamW8bit Adam8bit PagedAdamW PagedAdamW8bit PagedAdamW32bit Lamb LAMB "
    "FusedAdam FusedLAMB FusedSGD DeepSpeedCPUAdam SOAP Shampoo Prodigy AdEMAMix SophiaG "
    "AdamWScheduleFree SGDScheduleFree ZeroRedundancyOptimizer".split()
)
SCALER_CLASSES = frozenset({"GradScaler", "ShardedGradScaler"})
LOW_PRECISION = frozenset({"torch.bfloat16", "torch.float16", "torch.half"})
# Calls that build a tensor with no autograd history from their arguments' values.
TENSOR_FACTORIES = frozenset(
    "tensor as_tensor scalar_tensor zeros ones full empty zeros_like ones_like full_like "
    "empty_like".split()
)
LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)


def dotted(node: ast.AST | None) -> str | None:
    """``self.model.encoder`` for a Name/Attribute chain, None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def method(call: ast.AST, *names: str) -> ast.expr | None:
    """The receiver of ``<receiver>.<name>(...)`` when ``call`` is such a call."""
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in names
    ):
        return call.func.value
    return None


def kwarg(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def arg(call: ast.Call, index: int, name: str) -> ast.expr | None:
    """Argument ``name`` given by keyword, else the positional one at ``index``."""
    value = kwarg(call, name)
    if value is not None:
        return value
    if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
        return call.args[index]
    return None


def number(node: ast.AST | None) -> float | None:
    """The value of a numeric literal (``1e6``, ``-1``, ``float('inf')``), else None."""
    if isinstance(node, ast.Constant):
        value = node.value
        if type(value) is int or type(value) is float:  # not bool
            return float(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = number(node.operand)
        if inner is not None:
            return -inner if isinstance(node.op, ast.USub) else inner
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "float"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        try:
            return float(node.args[0].value)
        except ValueError:
            return None
    return None


def names_in(node: ast.AST) -> set[str]:
    """Every plain name read anywhere in ``node``."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def arith_names(node: ast.AST | None) -> set[str]:
    """Names that ``node`` combines arithmetically: ``a + w * b.mean()`` gives {a, w, b}.

    Calls other than tensor methods on a name (``.mean()``, ``.float()``) are not followed:
    ``criterion(out, y)`` contributes nothing.
    """
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.BinOp):
            stack += [n.left, n.right]
        elif isinstance(n, ast.UnaryOp):
            stack.append(n.operand)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and not n.args:
            stack.append(n.func.value)  # loss.mean(), loss.float()
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "sum":
            stack += n.args
        elif isinstance(n, (ast.List, ast.Tuple)):
            stack += n.elts
    return out


def unparse(node: ast.AST, limit: int = 60) -> str:
    """Source text of ``node`` for a message, shortened."""
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def contains_word(text: str, words: tuple[str, ...]) -> bool:
    low = text.lower()
    return any(w in low for w in words)


def returned_names(node: ast.AST | None) -> set[str]:
    """The loss names a ``return`` hands back: ``loss``, ``(loss, outputs)``, ``{"loss": loss}``."""
    if node is None:
        return set()
    if isinstance(node, ast.Tuple) and node.elts:
        return returned_names(node.elts[0])
    if isinstance(node, ast.IfExp):
        return returned_names(node.body) | returned_names(node.orelse)
    if isinstance(node, ast.Dict):
        out: set[str] = set()
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and key.value == "loss":
                out |= returned_names(value)
        return out
    return loss_roots(node)


def loss_roots(node: ast.AST | None) -> set[str]:
    """The names a loss expression is made of, without its scale factors and divisors:
    ``(loss / accum_steps)`` gives {loss}; ``ce + aux_weight * aux_loss`` gives {ce, aux_loss}."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, (ast.Div, ast.FloorDiv)):
            return loss_roots(node.left)
        if isinstance(node.op, ast.Mult):
            left, right = loss_roots(node.left), loss_roots(node.right)
            lossy = {n for n in left | right if "loss" in n.lower()}
            if lossy:
                return lossy
            if number(node.left) is not None:
                return right
            if number(node.right) is not None:
                return left
            return left | right
        return loss_roots(node.left) | loss_roots(node.right)
    if isinstance(node, ast.UnaryOp):
        return loss_roots(node.operand)
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and not node.args:
            return loss_roots(node.func.value)  # loss.mean()
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("clamp", "clip", "clamp_max"):
            on_torch = isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
            if on_torch and not node.args:
                return set()
            return loss_roots(node.args[0] if on_torch else node.func.value)  # torch.clamp(loss, max=c)
        if isinstance(node.func, ast.Name) and node.func.id == "sum":
            return set().union(*(loss_roots(a) for a in node.args)) if node.args else set()
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(loss_roots(e) for e in node.elts)) if node.elts else set()
    return set()
