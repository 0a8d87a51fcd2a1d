"""What a value is, as far as the source shows: a constant, a detached copy, a NaN test, a
checkpoint save and the file it writes, and (``value_of``) the expression behind a name, an
attribute of ``self`` or of a config, a dict entry or a parameter. Used by several rules; each
takes the ``Module`` to resolve names through the file's imports, assignments and calls.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Iterator

from traindoc.lint._nodes import TENSOR_FACTORIES, arg, arith_names, dotted, method, number, unparse

if TYPE_CHECKING:
    from traindoc.lint._flow import Module
    from traindoc.lint._index import IndexedFile
    from traindoc.lint._scope import Scope


def is_constant_value(mod: Module, node: ast.AST | None) -> bool:
    """A value with no autograd history: a number, ``torch.tensor(1e6)``, ``torch.zeros(())``,
    ``x.new_tensor(0.)``, ``x * 0``."""
    if node is None:
        return False
    if number(node) is not None:
        return True
    if isinstance(node, ast.Call):
        q = mod.callee(node)
        last = q.split(".")[-1]
        if q.startswith("torch.") and last in TENSOR_FACTORIES:
            data = node.args[0] if node.args else None
            if last.endswith("_like"):
                return True
            return data is None or _number_value(mod, data, node) or isinstance(data, (ast.Tuple, ast.List))
        if isinstance(node.func, ast.Attribute) and node.func.attr in (
            "new_tensor", "new_zeros", "new_ones", "new_full", "zero_"
        ):
            return True  # x.new_tensor(data) copies the data: never any autograd history
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return number(node.left) == 0 or number(node.right) == 0
    return False


def _number_value(mod: Module, node: ast.AST, call: ast.Call) -> bool:
    """A number: a literal, a name, constant or config field that holds one, or a run setting
    the file does not show (``args.max_loss``), an unknown number all the same."""
    if number(node) is not None:
        return True
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        value = value_of(mod, node, call)
        return number(value) is not None or config_read(mod, value, call)
    return False


REBUILDERS = ("torch.tensor", "torch.as_tensor", "torch.scalar_tensor", "torch.autograd.Variable")


def is_detached_value(mod: Module, node: ast.AST | None) -> str | None:
    """How a value lost its autograd history, as source text, else None: ``x.detach()``,
    ``x.data``, ``torch.tensor(x.item())``, ``x.detach().requires_grad_()``."""
    if node is None:
        return None
    inner = node
    while True:
        receiver = method(inner, "requires_grad_", "to", "float", "cuda", "clone")
        if receiver is None:
            break
        inner = receiver
    if method(inner, "detach") is not None:
        return unparse(node)
    if isinstance(inner, ast.Attribute) and inner.attr == "data":
        return unparse(node)
    if isinstance(inner, ast.Call):
        q = mod.callee(inner)
        if q in REBUILDERS and inner.args:
            data = inner.args[0]
            if number(data) is None and _has_value_escape(data):
                return unparse(node)
    return None


def _has_value_escape(node: ast.AST) -> bool:
    """``x.item()``, ``float(x)``, ``x.data``, ``x.detach()``, ``x.tolist()`` inside ``node``."""
    for n in ast.walk(node):
        if method(n, "item", "detach", "tolist", "cpu", "numpy") is not None:
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "float":
            return True
        if isinstance(n, ast.Attribute) and n.attr == "data":
            return True
    return False


def nonfinite_checked(mod: Module, test: ast.AST) -> set[str]:
    """Names a test checks for NaN/Inf: ``torch.isnan(loss)``, ``not torch.isfinite(loss)``,
    ``math.isnan(loss.item())``, ``loss.isnan().any()``, ``loss != loss``."""
    out: set[str] = set()
    for n in ast.walk(test):
        if isinstance(n, ast.Call):
            q = mod.callee(n)
            last = q.split(".")[-1]
            if last in ("isnan", "isinf", "isfinite", "isneginf", "isposinf") and (
                q.startswith(("torch.", "math.", "np.", "numpy.")) or q == last
            ):
                for a in n.args:
                    out |= arith_names(a) | _item_names(a)
            receiver = method(n, "isnan", "isinf", "isfinite")
            if receiver is not None:
                out |= arith_names(receiver)
        elif (
            isinstance(n, ast.Compare)
            and len(n.ops) == 1
            and isinstance(n.ops[0], ast.NotEq)
            and isinstance(n.left, ast.Name)
            and isinstance(n.comparators[0], ast.Name)
            and n.left.id == n.comparators[0].id
        ):
            out.add(n.left.id)
    return out


def _item_names(node: ast.AST) -> set[str]:
    receiver = method(node, "item")
    return arith_names(receiver) if receiver is not None else set()


# -- checkpoints ------------------------------------------------------------------------------


def torch_saves(mod: Module) -> list[tuple[ast.Call, ast.expr | None, ast.expr | None, ast.Call]]:
    """(site, object, path, torch.save call) for each checkpoint save in the file."""
    if mod._torch_saves is None:  # computed once per file
        mod._torch_saves = list(_torch_saves(mod))
    return mod._torch_saves


def _torch_saves(mod: Module) -> Iterator[tuple[ast.Call, ast.expr | None, ast.expr | None, ast.Call]]:
    """The saves, found:

    A direct ``torch.save(obj, path)`` is its own site. A call to a helper defined in this file
    that hands its own parameters to ``torch.save`` (``def save_checkpoint(state, path):
    torch.save(state, path)``) is a site too, with the caller's arguments: names are followed
    one function deep.
    """
    helpers: dict[str, tuple[int | None, int | None, ast.Call, list[str]]] = {}
    defaults: dict[str, dict[str, ast.expr]] = {}
    for call in mod.named("save"):
        if mod.callee(call) != "torch.save":
            continue
        obj, path = arg(call, 0, "obj"), arg(call, 1, "f")
        yield call, obj, path, call
        fn = mod.scope(call).node
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
            if params and params[0] == "self":
                params = params[1:]
            if _passes_through(call, fn):
                # def save_on_master(*args, **kwargs): torch.save(*args, **kwargs): the caller's
                # first two arguments are torch.save's (the torchvision-references idiom)
                helpers[fn.name] = (len(params), len(params) + 1, call, [*params, "obj", "f"])
                defaults[fn.name] = {}
                continue
            i_obj = params.index(obj.id) if isinstance(obj, ast.Name) and obj.id in params else None
            i_path = params.index(path.id) if isinstance(path, ast.Name) and path.id in params else None
            if i_obj is not None or i_path is not None:
                helpers[fn.name] = (i_obj, i_path, call, params)
                defaults[fn.name] = _defaults(fn)
    if not helpers:
        return
    for call in mod.named(*helpers):
        owner, _, name = (dotted(call.func) or "").rpartition(".")  # f(...), self.f(...), Steps.f(...)
        classes = {s.cls for s in mod.scopes if s.cls}
        sibling = name in mod.sibling_modules.get(owner, ())  # utils.save_on_master(...)
        if name in helpers and (not owner or owner == "self" or owner in classes or sibling):
            i_obj, i_path, inner, params = helpers[name]
            obj = arg(call, i_obj, params[i_obj]) if i_obj is not None else None
            path = arg(call, i_path, params[i_path]) if i_path is not None else None
            if path is None and i_path is not None:  # save_checkpoint(state, filename="checkpoint.pth.tar")
                path = defaults[name].get(params[i_path])
            yield call, obj, path, inner


def _passes_through(call: ast.Call, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``torch.save(*args, **kwargs)`` with the function's own ``*args``."""
    first = call.args[0] if call.args else None
    return (fn.args.vararg is not None and isinstance(first, ast.Starred) and isinstance(first.value, ast.Name)
            and first.value.id == fn.args.vararg.arg)


def _defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr]:
    """parameter -> its default value, for the parameters that have one."""
    positional = fn.args.posonlyargs + fn.args.args
    out = {a.arg: d for a, d in zip(positional[len(positional) - len(fn.args.defaults):], fn.args.defaults)}
    out.update({a.arg: d for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None})
    return out


def drops_optimizer(mod: Module, obj: ast.expr | None, at: ast.AST) -> bool:
    """The dict saved sets its optimizer entry to None (``"optimizer": None``): the state is
    left out on purpose, so the file is an export of weights, not a point to resume from."""
    node = resolve(mod, obj, at, depth=1)
    if isinstance(node, ast.Dict):
        items = [(k.value if isinstance(k, ast.Constant) else None, v) for k, v in zip(node.keys, node.values)]
    elif isinstance(node, ast.Call) and dotted(node.func) == "dict":
        items = [(kw.arg, kw.value) for kw in node.keywords]
    else:
        return False
    return any(
        isinstance(key, str) and "optim" in key.lower() and isinstance(value, ast.Constant) and value.value is None
        for key, value in items
    )


def resolve(mod: Module, node: ast.expr | None, at: ast.AST, depth: int = 2) -> ast.expr | None:
    """Follow a name to the value of its last assignment before ``at`` in the same function; an
    attribute of ``self`` to its only assignment in the class's methods (``self.path = ...`` in
    ``__init__``)."""
    if isinstance(node, ast.Attribute):
        text, cls = dotted(node), mod.scope(at).cls
        if text and text.startswith("self.") and cls:
            values = [
                v for s in mod.scopes if s.cls == cls
                for t, _, v in s.assigns if t == text and not isinstance(v, ast.AugAssign)
            ]
            return values[0] if len(values) == 1 else node
    while depth and isinstance(node, ast.Name):
        value = mod.scope(at).reaching(node.id, getattr(at, "lineno", 0))
        if value is None:
            return node
        node, depth = value, depth - 1
    return node


# A folder that lives for one run (pytest's tmp_path, tempfile's): nothing there is resumed from.
TEMP_DIRS = ("tmp_path", "tmpdir", "tempfile", "TemporaryDirectory", "mkdtemp", "gettempdir")


def in_temporary_dir(mod: Module, path: ast.expr | None, at: ast.AST) -> bool:
    """The checkpoint path is in a temporary folder (a test's ``tmp_path / "ckpt.pt"``)."""
    if path is None:
        return False
    shown = unparse(path, 400) + " " + unparse(value_of(mod, path, at) or path, 400)
    return any(w in shown for w in TEMP_DIRS)


def fixed_filename(mod: Module, path: ast.expr | None, at: ast.AST) -> str | None:
    """The file name a path expression always ends in (``ckpt.pt`` for
    ``os.path.join(out_dir, "ckpt.pt")`` or ``f"{out}/last.pt"``), None when it varies
    (``f"ckpt_{epoch}.pt"``) or cannot be followed (a function argument)."""
    node = resolve(mod, path, at)
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        # read where it stands: ``self.path``'s value is a name of the method that set it
        home = next(((s, stmt) for s in mod.scopes for _, stmt, v in s.assigns if v is node), None)
        # through a constructor and the function that calls it, to a default: six steps
        node = value_of(mod, node, at, 6) if home is None else value_of(mod, node, home[1], 6, scope=home[0])
    if node is None or isinstance(node, ast.Name):
        return None
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        # a path from the run's settings (``args.ckpt``) names one file for the whole run
        return mod.text(node) if config_read(mod, node, at) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.rsplit("/", 1)[-1] or None
    if isinstance(node, ast.JoinedStr):
        tail = node.values[-1] if node.values else None
        if isinstance(tail, ast.Constant) and isinstance(tail.value, str):
            if "/" in tail.value:
                return tail.value.rsplit("/", 1)[-1] or None
            if len(node.values) == 1:
                return tail.value
        return None
    if isinstance(node, ast.Call):
        q = mod.callee(node)
        if q.endswith(("path.join", "Path", "PurePath")) and node.args:
            return fixed_filename(mod, node.args[-1], at)
        if method(node, "joinpath") is not None and node.args:
            return fixed_filename(mod, node.args[-1], at)
        return None
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Div):
            return fixed_filename(mod, node.right, at)
        right = node.right
        if isinstance(node.op, ast.Add) and isinstance(right, ast.Constant) and isinstance(right.value, str):
            text = right.value
            return text.rsplit("/", 1)[-1] if "/" in text and not text.endswith("/") else None
    return None


# -- values read from names, constants and configs ----------------------------------------------

# Objects that hold run settings: their attributes are settings (``args.max_loss``).
CONFIG_WORDS = ("args", "cfg", "config", "conf", "hparams", "hp", "opts", "options", "settings", "flags")


def value_of(mod: IndexedFile, node: ast.expr | None, at: ast.AST, depth: int = 4,
             scope: Scope | None = None) -> ast.expr | None:
    """The expression behind ``node`` as far as the file shows it: a name's last assignment
    before ``at`` (in its function, else at module level), ``self.x``'s only assignment in the
    class, a dataclass config's field (``cfg.lr`` with ``cfg = TrainConfig()``: the keyword
    passed, else the field's default), an argparse option's default (``args.lr``), a dict
    config's entry (``CONFIG["lr"]``). ``node`` itself when it cannot be followed."""
    at = _located(mod, at)
    home = scope or mod.scope(at)  # names, constants and leaves are not indexed: the caller's scope
    while depth and node is not None:
        depth -= 1
        if isinstance(node, ast.Name):
            found = home.reaching(node.id, getattr(at, "lineno", 0))
            if found is None and node.id in _params(home):
                # a parameter: the argument of this file's only call of the function
                passed = _argument(mod, home, node.id)
                if passed is None:
                    return node
                node, at = passed
                home = mod.scope(at)
                continue
            if found is None and home.name != "<module>":
                found = mod.scopes[0].reaching(node.id, 10**9)
            if found is None or isinstance(found, ast.AugAssign):
                return node
            node = found
        elif isinstance(node, ast.Attribute):
            found = _attribute_value(mod, node, at, depth)
            if found is None:
                return node
            node = found
        elif isinstance(node, ast.Subscript):
            # CONFIG["lr"], or a table looked up by a name: {"bfloat16": torch.bfloat16, ...}[dtype]
            wanted = value_of(mod, node.slice, at, depth, scope)
            if not isinstance(wanted, ast.Constant):
                return node
            table = value_of(mod, node.value, at, depth)
            if not isinstance(table, ast.Dict):
                return node
            found = None
            for key, value in zip(table.keys, table.values):
                if isinstance(key, ast.Constant) and key.value == wanted.value:
                    found = value
            if found is None:
                return node
            # a lookup in a table written out is no hop: its value is followed as far, from
            # where the table is written
            node, at = found, _located(mod, found)
            depth += 1
        else:
            return node
    return node


def _located(mod: IndexedFile, node: ast.AST) -> ast.AST:
    """``node`` or the nearest enclosing node the index knows the function of."""
    while node not in mod.scope_of:
        up = mod.parent.get(node)
        if up is None:
            return node
        node = up
    return node


def _argument(mod: IndexedFile, scope: Scope, name: str) -> tuple[ast.expr, ast.Call] | None:
    """What the calls of ``scope`` in this file pass for its parameter ``name``, with the call:
    None unless they all pass the same expression (one call, usually)."""
    callers = getattr(mod, "callers_of", None)  # a Module (the flow), not a bare index
    fn = scope.node
    if callers is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
    if scope.cls is not None and params and params[0] in ("self", "cls"):
        params = params[1:]
    index = params.index(name) if name in params else 10**6
    default = _default(fn, name)
    found: list[tuple[ast.expr, ast.Call]] = []
    for call in callers(scope):
        value = arg(call, index, name)
        if value is None:
            unpacked = any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)
            if default is None or unpacked:
                return None
            value = default  # a call that leaves the parameter out: its default
        found.append((value, call))
    if not found or len({ast.dump(v) for v, _ in found}) != 1:
        return None
    return found[0]


def _default(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> ast.expr | None:
    """The default value of ``fn``'s parameter ``name``, None when it has none."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults = dict(zip([p.arg for p in positional[len(positional) - len(a.defaults):]], a.defaults))
    defaults.update((p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)
    return defaults.get(name)


def _params(scope: Scope) -> set[str]:
    fn = scope.node
    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = fn.args
        return {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    return set()


def _attribute_value(mod: IndexedFile, node: ast.Attribute, at: ast.AST, depth: int) -> ast.expr | None:
    """The value behind ``self.x``, ``cfg.field`` or ``args.option``; ``depth`` bounds the
    names followed on the way (``self.a = b`` and ``b = self.a`` must not loop)."""
    if depth <= 0:
        return None
    text = dotted(node)
    scope = mod.scope(at)
    if text and not text.startswith("self."):
        # ``cfg.out = f"run_{seed}"`` before the read: the assignment wins over the default
        assigned = scope.reaching(text, getattr(at, "lineno", 0))
        if assigned is not None:
            return assigned
    cls = scope.cls
    if text and text.startswith("self.") and text.count(".") == 1 and cls:
        found = [
            (v, stmt) for s in mod.scopes if s.cls == cls
            for t, stmt, v in s.assigns if t == text and not isinstance(v, ast.AugAssign)
        ]
        if len(found) != 1 or isinstance(found[0][0], ast.AugAssign):
            return None
        value, stmt = found[0]
        if isinstance(value, ast.Name):  # self.args = args: follow the name where it is assigned
            return value_of(mod, value, stmt, depth - 1)
        return value
    owner = value_of(mod, node.value, at, min(2, depth - 1))
    if not isinstance(owner, ast.Call):
        return None
    if method(owner, "parse_args", "parse_known_args") is not None:
        return _argparse_default(mod, node.attr)
    name = dotted(owner.func)
    for kw in owner.keywords:
        if kw.arg == node.attr:
            return kw.value
    for stmt in mod.tree.body:  # config classes are defined at module level
        if isinstance(stmt, ast.ClassDef) and stmt.name == name:
            for item in stmt.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) \
                        and item.target.id == node.attr and item.value is not None:
                    return item.value
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == node.attr for t in item.targets
                ):
                    return item.value
    return None


def _argparse_default(mod: IndexedFile, option: str) -> ast.expr | None:
    for call in mod.named("add_argument"):
        flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        dest = next((kw.value for kw in call.keywords if kw.arg == "dest"), None)
        names = {f.lstrip("-").replace("-", "_") for f in flags}
        if isinstance(dest, ast.Constant):
            names = {str(dest.value)}
        if option in names:
            return next((kw.value for kw in call.keywords if kw.arg == "default"), None)
    return None


def config_read(mod: IndexedFile, node: ast.AST | None, at: ast.AST) -> bool:
    """``node`` reads a run setting whose value the file does not show: ``args.max_loss``,
    ``cfg.cap``, ``self.config.path``, ``hparams["lr"]``: an unknown of the setting's type."""
    if isinstance(node, ast.Subscript):
        base: ast.expr = node.value
    elif isinstance(node, ast.Attribute):
        base = node.value
    else:
        return False
    text = dotted(base)
    if text and text.split(".")[-1].lower() in CONFIG_WORDS:
        return True
    owner = value_of(mod, base, at, 2)
    return isinstance(owner, ast.Call) and method(owner, "parse_args", "parse_known_args") is not None
