"""Semantics-preserving respellings of lint rule examples (metamorphic tests).

Each variant kind rewrites an example's AST into code that does the same thing, written the way
other people write it: the loop moved into a helper function or into a ``Trainer`` method,
literals read from a module constant, a dataclass config or argparse defaults, torch imported
bare or under another name, method-form instead of function-form calls, the loop over
``enumerate`` or a list, the loop body in a ``train_step`` helper. A kind that does not apply to
an example returns None.

Where an invalid example must fire is tracked through the rewrite: the first node on each
expected line is tagged, the rewritten tree is unparsed and parsed again, and the two trees
are walked side by side to read the tagged node's new line.
"""

from __future__ import annotations

import ast
import builtins
import copy
from dataclasses import dataclass
from typing import Callable, Iterable

MARK = "_traindoc_mark"
# Modules a snippet may use without importing them: never parameters or attributes of self.
MODULES = frozenset({"torch", "nn", "F", "np", "math", "dist", "os", "copy"})
BUILTINS = frozenset(dir(builtins)) | MODULES
PATH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".tmp", ".partial")
DTYPES = ("bfloat16", "float16", "half")


@dataclass(frozen=True)
class Variant:
    kind: str
    code: str
    lines: tuple[int, ...]


# -- helpers ---------------------------------------------------------------------------------


def _mark(tree: ast.Module, lines: Iterable[int]) -> None:
    for line in lines:
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) == line and not isinstance(node, ast.Module):
                setattr(node, MARK, True)
                break
        else:
            raise AssertionError(f"no node at line {line}")


def _render(tree: ast.Module) -> tuple[str, tuple[int, ...]]:
    ast.fix_missing_locations(tree)
    code = ast.unparse(tree) + "\n"
    again = ast.parse(code)
    lines = []
    for a, b in zip(ast.walk(tree), ast.walk(again)):
        assert type(a) is type(b), (type(a), type(b))
        if getattr(a, MARK, False):
            lines.append(b.lineno)
    return code, tuple(sorted(set(lines)))


def _is_import(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.Import, ast.ImportFrom))


def _is_def(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))


def _bound(tree: ast.AST) -> set[str]:
    """Names the code binds: assignment targets, imports, defs, parameters, loop targets."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
    return out


def _loaded(nodes: Iterable[ast.AST]) -> list[str]:
    seen: list[str] = []
    for top in nodes:
        for n in ast.walk(top):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in seen:
                seen.append(n.id)
    return seen


def _free(tree: ast.Module) -> list[str]:
    """Names the example uses without defining them (``model``, ``optimizer``, ``loader``)."""
    bound = _bound(tree)
    return [n for n in _loaded([tree]) if n not in bound and n not in BUILTINS]


def _split(tree: ast.Module) -> tuple[list[ast.stmt], list[ast.stmt], list[ast.stmt]]:
    imports = [s for s in tree.body if _is_import(s)]
    defs = [s for s in tree.body if _is_def(s)]
    rest = [s for s in tree.body if not _is_import(s) and not _is_def(s)]
    return imports, defs, rest


def _call(name: str, args: list[str]) -> ast.Expr:
    return ast.Expr(ast.Call(ast.Name(name, ast.Load()), [ast.Name(a, ast.Load()) for a in args], []))


def _fn(name: str, params: list[str], body: list[ast.stmt]) -> ast.FunctionDef:
    fn = ast.parse(f"def {name}({', '.join(params)}):\n    pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    fn.body = body or [ast.Pass()]
    return fn


def _unique(base: str, taken: set[str]) -> str:
    name, i = base, 2
    while name in taken:
        name, i = f"{base}{i}", i + 1
    return name


# -- kinds -----------------------------------------------------------------------------------


def helper(tree: ast.Module) -> ast.Module | None:
    """The module-level training code moved into ``def run(model, optimizer, ...)``."""
    imports, defs, rest = _split(tree)
    if not rest:
        return None
    stored = {n.id for s in rest for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if any(n in stored for d in defs for n in _loaded([d])):
        return None  # a function reads a module-level name the code assigns: it must stay global
    free = _free(tree)
    params = [n for n in _loaded(rest) if n in free]
    name = _unique("run", _bound(tree))
    tree.body = imports + defs + [_fn(name, params, rest), _call(name, params)]
    return tree


class _ToSelf(ast.NodeTransformer):
    """Inside a method: free names become ``self.<name>``, module functions ``self.<fn>``."""

    def __init__(self, names: set[str], functions: set[str]) -> None:
        self.names, self.functions = names, functions

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names or (node.id in self.functions and isinstance(node.ctx, ast.Load)):
            return ast.copy_location(ast.Attribute(ast.Name("self", ast.Load()), node.id, node.ctx), node)
        return node


def method(tree: ast.Module) -> ast.Module | None:
    """Functions and the training code moved into a ``Trainer`` class; the objects it uses are
    attributes of ``self`` set in ``__init__``; ``fit()`` runs what the module ran."""
    imports, defs, rest = _split(tree)
    functions = [d for d in defs if isinstance(d, ast.FunctionDef)]
    classes = [d for d in defs if not isinstance(d, ast.FunctionDef)]
    if any(d.decorator_list for d in functions):
        return None
    if "self" in _bound(tree):
        return _self_functions(tree)
    free = _free(tree)
    fn_names = {f.name for f in functions}
    run_name = _unique("train_loop", _bound(tree))
    # free names used by the module code become attributes; functions keep their parameters
    attrs = [n for n in _loaded(rest) if n in free]
    if not rest and not functions:
        return None
    init = _fn("__init__", ["self", *attrs], [
        ast.Assign([ast.Attribute(ast.Name("self", ast.Load()), a, ast.Store())], ast.Name(a, ast.Load()))
        for a in attrs
    ])
    methods: list[ast.stmt] = [init]
    for f in functions:
        f.args.args.insert(0, ast.arg("self"))
        # a function reads module-level names of the snippet as globals; keep them so
        _ToSelf(set(), fn_names).visit(f)
        methods.append(f)
    # names assigned at module level are globals the functions read: make them attributes too
    module_bound = {n.id for s in rest for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if any(n in module_bound for f in functions for n in _loaded([f])):
        return None
    body = [_ToSelf(set(attrs), fn_names).visit(s) for s in rest]
    methods.append(_fn(run_name, ["self"], body))
    cls = ast.ClassDef("Trainer", [], [], methods, [])
    run = ast.Expr(ast.Call(ast.Attribute(
        ast.Call(ast.Name("Trainer", ast.Load()), [ast.Name(a, ast.Load()) for a in attrs], []),
        run_name, ast.Load()), [], []))
    tree.body = imports + classes + [cls, run]
    return tree


def _self_functions(tree: ast.Module) -> ast.Module | None:
    """Module-level functions whose first parameter is ``self`` put into the class they came
    from."""
    group = [
        s for s in tree.body
        if isinstance(s, ast.FunctionDef) and s.args.args and s.args.args[0].arg == "self"
    ]
    if not group or "Trainer" in _bound(tree):
        return None
    i = tree.body.index(group[0])
    tree.body = [s for s in tree.body if s not in group]
    tree.body.insert(i, ast.ClassDef("Trainer", [], [], group, []))
    return tree


def _literal_sites(tree: ast.Module) -> list[ast.Constant]:
    """Numbers other than 0 and 1 and path-like strings, outside subscripts and f-strings."""
    skip: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Subscript, ast.JoinedStr, ast.FormattedValue)):
            for m in ast.walk(n.slice if isinstance(n, ast.Subscript) else n):
                skip.add(id(m))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("print", "range"):
            for m in ast.walk(n):
                skip.add(id(m))
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant):
            skip.add(id(n.value))  # docstrings
        if isinstance(n, ast.keyword) and n.arg in ("device", "reduction", "op", "dim"):
            for m in ast.walk(n.value):
                skip.add(id(m))
    out = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Constant) or id(n) in skip:
            continue
        v = n.value
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and v not in (0, 1):
            out.append(n)
        elif isinstance(v, str) and (v.endswith(PATH_SUFFIXES) or ("/" in v and " " not in v)):
            out.append(n)
    return out


def _dtype_sites(tree: ast.Module) -> list[ast.Attribute]:
    return [
        n for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr in DTYPES and isinstance(n.value, ast.Name)
        and n.value.id == "torch" and isinstance(n.ctx, ast.Load)
    ]


class _Replace(ast.NodeTransformer):
    def __init__(self, table: dict[int, ast.expr]) -> None:
        self.table = table

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if id(node) in self.table:
            new = self.table[id(node)]
            ast.copy_location(new, node)
            if getattr(node, MARK, False):
                setattr(new, MARK, True)
            return new
        return super().generic_visit(node)


def _after_imports(tree: ast.Module, stmts: list[ast.stmt]) -> None:
    i = 0
    while i < len(tree.body) and _is_import(tree.body[i]):
        i += 1
    tree.body[i:i] = stmts


def _literal_names(sites: list[ast.AST]) -> list[str]:
    names = []
    for n in sites:
        if isinstance(n, ast.Attribute):
            names.append("dtype")
        elif isinstance(n.value, str):
            names.append("path")
        else:
            names.append("value")
    counts: dict[str, int] = {}
    out = []
    for name in names:
        counts[name] = counts.get(name, 0) + 1
        out.append(f"{name}_{counts[name]}")
    return out


def constants(tree: ast.Module) -> ast.Module | None:
    """Numbers, paths and dtypes read from module-level constants (``MAX_VALUE_1 = 1e6``)."""
    sites: list[ast.AST] = [*_literal_sites(tree), *_dtype_sites(tree)]
    if not sites:
        return None
    names = [n.upper() for n in _literal_names(sites)]
    defs = [ast.Assign([ast.Name(n, ast.Store())], copy.deepcopy(s)) for n, s in zip(names, sites)]
    for d in defs:
        if hasattr(d.value, MARK):
            delattr(d.value, MARK)
    _Replace({id(s): ast.Name(n, ast.Load()) for s, n in zip(sites, names)}).visit(tree)
    _after_imports(tree, defs)
    return tree


def config(tree: ast.Module) -> ast.Module | None:
    """Numbers, paths and dtypes read from a dataclass config's field defaults (``cfg.value_1``)."""
    sites: list[ast.AST] = [*_literal_sites(tree), *_dtype_sites(tree)]
    if not sites or "cfg" in _bound(tree) | set(_loaded([tree])):
        return None
    names = _literal_names(sites)
    fields = []
    for n, s in zip(names, sites):
        kind = "torch.dtype" if isinstance(s, ast.Attribute) else type(s.value).__name__
        value = copy.deepcopy(s)
        if hasattr(value, MARK):
            delattr(value, MARK)
        fields.append(f"    {n}: {kind} = {ast.unparse(value)}")
    cls = ast.parse("@dataclass\nclass TrainConfig:\n" + "\n".join(fields) + "\ncfg = TrainConfig()\n").body
    _Replace({
        id(s): ast.Attribute(ast.Name("cfg", ast.Load()), n, ast.Load()) for s, n in zip(sites, names)
    }).visit(tree)
    tree.body.insert(0, ast.ImportFrom("dataclasses", [ast.alias("dataclass")], 0))
    if isinstance(sites[-1], ast.Attribute) and "torch" not in _bound(tree):
        tree.body.insert(0, ast.Import([ast.alias("torch")]))
    _after_imports(tree, cls)
    return tree


def argparse_args(tree: ast.Module) -> ast.Module | None:
    """Numbers and paths read from ``args`` with the literal as the argument's default."""
    sites = _literal_sites(tree)
    if not sites or "args" in _bound(tree) | set(_loaded([tree])):
        return None
    names = _literal_names(sites)
    lines = ["parser = argparse.ArgumentParser()"]
    for n, s in zip(names, sites):
        lines.append(f"parser.add_argument('--{n}', type={type(s.value).__name__}, default={s.value!r})")
    lines.append("args = parser.parse_args()")
    _Replace({
        id(s): ast.Attribute(ast.Name("args", ast.Load()), n, ast.Load()) for s, n in zip(sites, names)
    }).visit(tree)
    tree.body.insert(0, ast.Import([ast.alias("argparse")]))
    _after_imports(tree, ast.parse("\n".join(lines)).body)
    return tree


def _torch_calls(tree: ast.Module) -> list[tuple[ast.Attribute, str, str]]:
    """``torch.a.b.f`` call targets: (node, module path, function name)."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            parts = []
            cur: ast.AST = n.func
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id == "torch":
                parts.reverse()
                out.append((n.func, "torch." + ".".join(parts[:-1]) if parts[:-1] else "torch", parts[-1]))
    return out


def _bare(tree: ast.Module, rename: Callable[[str], str]) -> ast.Module | None:
    calls = _torch_calls(tree)
    taken = _bound(tree) | set(_loaded([tree]))
    calls = [c for c in calls if rename(c[2]) not in taken]
    if not calls:
        return None
    imports: dict[tuple[str, str], str] = {}
    table: dict[int, ast.expr] = {}
    for node, module, name in calls:
        local = rename(name)
        imports[(module, name)] = local
        table[id(node)] = ast.Name(local, ast.Load())
    _Replace(table).visit(tree)
    stmts = [
        ast.ImportFrom(module, [ast.alias(name, None if local == name else local)], 0)
        for (module, name), local in imports.items()
    ]
    tree.body[0:0] = stmts
    return tree


def bare_import(tree: ast.Module) -> ast.Module | None:
    """``torch.nan_to_num(x)`` written ``from torch import nan_to_num; nan_to_num(x)``."""
    return _bare(tree, lambda name: name)


def alias_import(tree: ast.Module) -> ast.Module | None:
    """Functions imported under another name: ``from torch.nn.utils import clip_grad_norm_ as
    clip_grad_norm__fn``."""
    return _bare(tree, lambda name: f"{name.rstrip('_')}_fn")


class _RenameModule(ast.NodeTransformer):
    def __init__(self, table: dict[str, str]) -> None:
        self.table = table

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.table:
            node.id = self.table[node.id]
        return node

    def visit_Import(self, node: ast.Import) -> ast.AST:
        for a in node.names:
            if a.asname in self.table:
                a.asname = self.table[a.asname]
            elif a.asname is None and a.name in self.table:
                a.asname = self.table[a.name]
        return node


def alias_module(tree: ast.Module) -> ast.Module | None:
    """Modules under other names: ``import torch as th``, ``import torch.nn.functional as fn``."""
    table = {}
    for s in tree.body:
        if isinstance(s, ast.Import):
            for a in s.names:
                if a.name == "torch" and a.asname is None:
                    table["torch"] = "th"
                elif a.asname and a.name.startswith("torch"):
                    table[a.asname] = f"{a.asname.lower()}_mod"
    if not table or set(table.values()) & (_bound(tree) | set(_loaded([tree]))):
        return None
    return _RenameModule(table).visit(tree)


# function form -> method form and back, for calls whose first argument is the tensor
_METHOD_FORMS = ("nan_to_num", "clamp", "isnan", "isfinite", "isinf", "where", "detach", "clip")
_CAST_FORMS = {"bfloat16": "bfloat16", "float16": "half", "half": "half"}


class _MethodForm(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if (
            isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch"
            and f.attr in _METHOD_FORMS and f.attr != "where" and node.args
        ):
            self.changed = True
            new = ast.Call(ast.Attribute(node.args[0], f.attr, ast.Load()), node.args[1:], node.keywords)
            return ast.copy_location(new, node)
        if (
            isinstance(f, ast.Attribute) and f.attr == "to" and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.Attribute) and node.args[0].attr in _CAST_FORMS
            and isinstance(node.args[0].value, ast.Name) and node.args[0].value.id == "torch"
        ):
            self.changed = True
            new = ast.Call(ast.Attribute(f.value, _CAST_FORMS[node.args[0].attr], ast.Load()), [], [])
            return ast.copy_location(new, node)
        if isinstance(f, ast.Attribute) and f.attr in ("bfloat16", "half") and not node.args:
            self.changed = True
            dtype = ast.Attribute(ast.Name("torch", ast.Load()), "bfloat16" if f.attr == "bfloat16" else "float16",
                                  ast.Load())
            f.attr = "to"
            node.keywords = [ast.keyword("dtype", dtype)]
            return node
        if (
            isinstance(f, ast.Attribute) and f.attr == "backward" and not node.args and not node.keywords
            and isinstance(f.value, (ast.Name, ast.Attribute))
        ):
            self.changed = True
            new = ast.Call(ast.parse("torch.autograd.backward", mode="eval").body, [f.value], [])
            return ast.copy_location(new, node)
        return node


def method_form(tree: ast.Module) -> ast.Module | None:
    """Function form written as a method and back: ``torch.nan_to_num(x)`` as
    ``x.nan_to_num()``, ``x.to(torch.bfloat16)`` as ``x.bfloat16()``, ``x.half()`` as
    ``x.to(dtype=torch.float16)``, ``loss.backward()`` as ``torch.autograd.backward(loss)``."""
    t = _MethodForm()
    t.visit(tree)
    if not t.changed:
        return None
    if "torch" not in _bound(tree):
        tree.body.insert(0, ast.Import([ast.alias("torch")]))
    return tree


def _first_for(tree: ast.Module) -> tuple[ast.For, list[ast.stmt]] | None:
    """The first ``for`` loop over something other than ``range`` (else the first loop), with
    the list of statements it is in."""
    loops = []
    for n in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(n, field, None)
            if isinstance(block, list):
                loops += [(s, block) for s in block if isinstance(s, ast.For) and not s.orelse]
    for s, block in loops:
        if not (isinstance(s.iter, ast.Call) and isinstance(s.iter.func, ast.Name) and s.iter.func.id == "range"):
            return s, block
    return loops[0] if loops else None


def enumerate_loop(tree: ast.Module) -> ast.Module | None:
    """``for x, y in loader`` written ``for step, (x, y) in enumerate(loader)``."""
    found = _first_for(tree)
    if found is None or "step_i" in _bound(tree):
        return None
    loop, _ = found
    loop.target = ast.Tuple([ast.Name("step_i", ast.Store()), loop.target], ast.Store())
    loop.iter = ast.Call(ast.Name("enumerate", ast.Load()), [loop.iter], [])
    return tree


def list_loop(tree: ast.Module) -> ast.Module | None:
    """The loop runs over a list built first: ``batches = list(loader); for x, y in batches``."""
    found = _first_for(tree)
    if found is None or "batches" in _bound(tree) | set(_loaded([tree])):
        return None
    loop, block = found
    build = ast.Assign([ast.Name("batches", ast.Store())], ast.Call(ast.Name("list", ast.Load()), [loop.iter], []))
    loop.iter = ast.Name("batches", ast.Load())
    block.insert(block.index(loop), build)
    return tree


def _position(n: ast.AST) -> tuple[int, int]:
    return (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))


def step_helper(tree: ast.Module) -> ast.Module | None:
    """The loop body moved into ``def train_step(...)`` called once per iteration (when the
    body carries nothing from one iteration to the next and leaves nothing behind)."""
    found = _first_for(tree)
    if found is None:
        return None
    loop, _ = found
    body = loop.body
    nodes = [n for s in body for n in ast.walk(s)]
    if any(isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Yield, ast.YieldFrom, ast.AugAssign,
                          ast.Global, ast.Nonlocal, ast.FunctionDef, ast.Lambda)) for n in nodes):
        return None
    stored = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    # attributes or items assigned in the body stay visible through the object: fine.
    inside = {id(n) for n in nodes}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in stored and id(n) not in inside:
            if not (isinstance(n.ctx, ast.Store) and n in ast.walk(loop.target)):
                return None  # the name lives outside the body too
    first_store: dict[str, tuple[int, int]] = {}
    for n in nodes:
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            first_store[n.id] = min(first_store.get(n.id, (10**9, 0)), _position(n))
    for n in nodes:
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in first_store:
            if _position(n) <= first_store[n.id]:
                return None  # read before written: carried across iterations
    imported = {(a.asname or a.name).split(".")[0] for s in tree.body if _is_import(s) for a in s.names}
    module_fns = {s.name for s in tree.body if _is_def(s)}
    params = [n for n in _loaded(body) if n not in stored and n not in BUILTINS and n not in imported
              and n not in module_fns]
    name = _unique("train_step", _bound(tree))
    # inside a method the helper is a method of the same class: ``self.train_step(x, y)``
    cls = next((c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and any(m is loop for m in ast.walk(c))), None)
    method_of = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and any(m is loop for m in ast.walk(f))
                      and f.args.args and f.args.args[0].arg == "self"), None) if cls else None
    if cls is not None and method_of is not None and "self" in params:
        params.remove("self")
        helper_fn = _fn(name, ["self", *params], body)
        call = ast.Expr(ast.Call(ast.Attribute(ast.Name("self", ast.Load()), name, ast.Load()),
                                 [ast.Name(a, ast.Load()) for a in params], []))
        loop.body = [call]
        cls.body.insert(cls.body.index(method_of), helper_fn)
        return tree
    helper_fn = _fn(name, params, body)
    loop.body = [_call(name, params)]
    top = next(s for s in tree.body if loop is s or any(m is loop for m in ast.walk(s)))
    i = tree.body.index(top)
    tree.body.insert(i, helper_fn)
    return tree


def main_guard(tree: ast.Module) -> ast.Module | None:
    """The module-level code in ``def main():`` run under ``if __name__ == "__main__":``."""
    imports, defs, rest = _split(tree)
    if not rest or "main" in _bound(tree):
        return None
    stored = sorted({n.id for s in rest for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)})
    if any(n in stored for d in defs for n in _loaded([d])):
        return None  # a function reads a module-level name the code assigns
    guard = ast.parse('if __name__ == "__main__":\n    main()').body
    tree.body = imports + defs + [_fn("main", [], rest), *guard]
    return tree


def dict_config(tree: ast.Module) -> ast.Module | None:
    """Numbers and paths read from a config dict (``CONFIG["value_1"]``), as YAML-loaded
    configs are."""
    sites = _literal_sites(tree)
    if not sites or "CONFIG" in _bound(tree):
        return None
    names = _literal_names(sites)
    pairs = ", ".join(f"{n!r}: {s.value!r}" for n, s in zip(names, sites))
    _Replace({
        id(s): ast.Subscript(ast.Name("CONFIG", ast.Load()), ast.Constant(n), ast.Load())
        for s, n in zip(sites, names)
    }).visit(tree)
    _after_imports(tree, ast.parse(f"CONFIG = {{{pairs}}}").body)
    return tree


def while_loop(tree: ast.Module) -> ast.Module | None:
    """``for batch in loader`` written ``it = iter(loader); while True: try: batch = next(it)
    except StopIteration: break``."""
    found = _first_for(tree)
    if found is None or "batch_iter" in _bound(tree):
        return None
    loop, block = found
    if any(isinstance(n, ast.Continue) for s in loop.body for n in ast.walk(s)):
        return None
    head = ast.parse("while True:\n    try:\n        X = next(batch_iter)\n    except StopIteration:\n        break").body[0]
    assert isinstance(head, ast.While) and isinstance(head.body[0], ast.Try)
    get = head.body[0].body[0]
    assert isinstance(get, ast.Assign)
    get.targets = [loop.target]
    head.body += loop.body
    start = ast.Assign([ast.Name("batch_iter", ast.Store())], ast.Call(ast.Name("iter", ast.Load()), [loop.iter], []))
    if getattr(loop, MARK, False):
        setattr(head, MARK, True)
    i = block.index(loop)
    block[i:i + 1] = [start, head]
    return tree


RENAMES = {"model": "net", "optimizer": "opt", "loader": "train_loader", "scheduler": "lr_sched",
           "scaler": "grad_scaler", "criterion": "loss_fn", "loss": "batch_loss"}


class _Rename(ast.NodeTransformer):
    def __init__(self, own: set[str]) -> None:
        self.own = own
        self.changed = False

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in RENAMES:
            node.id, self.changed = RENAMES[node.id], True
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        if node.arg in RENAMES:
            node.arg, self.changed = RENAMES[node.arg], True
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in RENAMES:
            node.attr, self.changed = RENAMES[node.attr], True
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in self.own:
            for k in node.keywords:
                if k.arg in RENAMES:
                    k.arg = RENAMES[k.arg]
        return node


def rename_objects(tree: ast.Module) -> ast.Module | None:
    """The objects under other common names: ``net``, ``opt``, ``lr_sched``, ``grad_scaler``,
    ``loss_fn``, ``batch_loss``."""
    taken = _bound(tree) | set(_loaded([tree]))
    if set(RENAMES.values()) & taken:
        return None
    own = {s.name for s in ast.walk(tree) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    t = _Rename(own)
    t.visit(tree)
    return tree if t.changed else None


def self_locals(tree: ast.Module) -> ast.Module | None:
    """In each method, the attributes of ``self`` it only reads are bound to locals first
    (``model = self.model``), when no method but ``__init__`` assigns them."""
    assigned = {
        n.attr for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name != "__init__"
        for n in ast.walk(f) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
    }
    changed = False
    for f in ast.walk(tree):
        if not (isinstance(f, ast.FunctionDef) and f.args.args and f.args.args[0].arg == "self"):
            continue
        if f.name == "__init__":
            continue
        taken = _bound(f) | set(_loaded([f]))
        reads: list[str] = []
        for n in ast.walk(f):
            if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
                    and isinstance(n.ctx, ast.Load) and n.attr not in assigned and n.attr not in taken
                    and n.attr not in reads):
                reads.append(n.attr)
        calls = {id(c.func) for c in ast.walk(f) if isinstance(c, ast.Call)}
        reads = [r for r in reads if not any(
            isinstance(n, ast.Attribute) and n.attr == r and id(n) in calls for n in ast.walk(f))]
        if not reads:
            continue
        _Replace({
            id(n): ast.Name(n.attr, ast.Load()) for n in ast.walk(f)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            and n.attr in reads and isinstance(n.ctx, ast.Load)
        }).visit(f)
        binds = ast.parse("\n".join(f"{r} = self.{r}" for r in reads)).body
        start = 1 if f.body and isinstance(f.body[0], ast.Expr) and isinstance(f.body[0].value, ast.Constant) else 0
        f.body[start:start] = binds
        changed = True
    return tree if changed else None


def self_as_param(tree: ast.Module) -> ast.Module | None:
    """A module-level function taking the trainer as ``self`` written with ``trainer``."""
    changed = False
    for f in tree.body:
        if isinstance(f, ast.FunctionDef) and f.args.args and f.args.args[0].arg == "self":
            if "trainer" in _bound(f) | set(_loaded([f])):
                return None
            f.args.args[0].arg = "trainer"
            for n in ast.walk(f):
                if isinstance(n, ast.Name) and n.id == "self":
                    n.id = "trainer"
            changed = True
    return tree if changed else None


TORCH_PARAMS = {"save": ("obj", "f"), "clip_grad_norm_": ("parameters", "max_norm"),
                "clip_grad_value_": ("parameters", "clip_value")}


def kwargs_call(tree: ast.Module) -> ast.Module | None:
    """Arguments passed by keyword: to the example's own functions, to ``torch.save``
    (``f=path``) and to the gradient clipping functions."""
    own = {
        s.name: [a.arg for a in s.args.posonlyargs] + [a.arg for a in s.args.args]
        for s in tree.body if isinstance(s, ast.FunctionDef)
    }
    positional_only = {s.name for s in tree.body if isinstance(s, ast.FunctionDef) and s.args.posonlyargs}
    changed = False
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call) or any(isinstance(a, ast.Starred) for a in n.args):
            continue
        name = n.func.id if isinstance(n.func, ast.Name) else n.func.attr if isinstance(n.func, ast.Attribute) else ""
        if isinstance(n.func, ast.Name) and name in own and name not in positional_only:
            params = own[name]
        elif name in TORCH_PARAMS and (
            not isinstance(n.func, ast.Attribute) or ast.unparse(n.func).startswith(("torch.", "nn."))
        ):
            params = list(TORCH_PARAMS[name])
        else:
            continue
        if not n.args or len(n.args) > len(params):
            continue
        keep = 1 if name in TORCH_PARAMS else 0
        moved = n.args[keep:]
        if not moved:
            continue
        n.keywords = [ast.keyword(p, a) for p, a in zip(params[keep:], moved)] + n.keywords
        n.args = n.args[:keep]
        changed = True
    return tree if changed else None


def static_method(tree: ast.Module) -> ast.Module | None:
    """Module-level functions as static methods of a ``Steps`` class, called through it."""
    functions = [s for s in tree.body if isinstance(s, ast.FunctionDef) and not s.decorator_list
                 and not (s.args.args and s.args.args[0].arg == "self")]
    if not functions or "Steps" in _bound(tree):
        return None
    names = {f.name for f in functions}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in names and not isinstance(n.ctx, ast.Load):
            return None
    for f in functions:
        f.decorator_list = [ast.Name("staticmethod", ast.Load())]
    _Replace({
        id(n): ast.Attribute(ast.Name("Steps", ast.Load()), n.id, ast.Load())
        for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
    }).visit(tree)
    i = tree.body.index(functions[0])
    tree.body = [s for s in tree.body if s not in functions]
    tree.body.insert(i, ast.ClassDef("Steps", [], [], functions, []))
    return tree


def local_imports(tree: ast.Module) -> ast.Module | None:
    """Imports inside the functions that use them (lazy imports), kept at the top only when
    module-level code uses them too."""
    imports, defs, rest = _split(tree)
    functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and f in defs or any(f in c.body for c in defs if isinstance(c, ast.ClassDef))]
    if not imports or not functions:
        return None
    used_at_top = set(_loaded(rest)) | {
        n.id for d in defs if isinstance(d, ast.ClassDef) for b in d.bases + d.decorator_list
        for n in ast.walk(b) if isinstance(n, ast.Name)}
    used_at_top |= {n.id for d in defs if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for part in [*d.decorator_list, *d.args.defaults, *[a.annotation for a in d.args.args if a.annotation]]
                    for n in ast.walk(part) if isinstance(n, ast.Name)}
    changed = False
    for imp in imports:
        names = {(a.asname or a.name).split(".")[0] for a in imp.names}
        if names & used_at_top:
            continue
        for f in functions:
            if names & set(_loaded(f.body)):
                f.body.insert(0, copy.deepcopy(imp))
                changed = True
        tree.body.remove(imp)
    return tree if changed else None


KINDS: dict[str, Callable[[ast.Module], ast.Module | None]] = {
    "helper": helper,
    "method": method,
    "constants": constants,
    "config": config,
    "argparse": argparse_args,
    "bare_import": bare_import,
    "alias_import": alias_import,
    "alias_module": alias_module,
    "method_form": method_form,
    "enumerate_loop": enumerate_loop,
    "list_loop": list_loop,
    "step_helper": step_helper,
    "main_guard": main_guard,
    "dict_config": dict_config,
    "while_loop": while_loop,
    "rename_objects": rename_objects,
    "self_locals": self_locals,
    "self_as_param": self_as_param,
    "kwargs_call": kwargs_call,
    "static_method": static_method,
    "local_imports": local_imports,
}
# Two rewrites in a row, each a spelling the issue names (a class reading self.cfg, ...).
COMBOS = [
    ("config", "method"), ("argparse", "helper"), ("alias_module", "method"), ("step_helper", "method"),
    ("list_loop", "helper"), ("method_form", "method"), ("constants", "step_helper"),
    ("rename_objects", "method"), ("bare_import", "helper"), ("dict_config", "main_guard"),
    ("while_loop", "method"), ("method", "self_locals"), ("local_imports", "method"),
    ("kwargs_call", "method"), ("rename_objects", "static_method"),
]


def variants(code: str, lines: tuple[int, ...] = ()) -> list[Variant]:
    """Every variant of a (dedented) example that its kinds apply to, with the lines where an
    invalid example must now fire."""
    out = []
    names = [(k,) for k in KINDS] + COMBOS
    for chain in names:
        tree = ast.parse(code)
        _mark(tree, lines)
        result: ast.Module | None = tree
        for kind in chain:
            result = KINDS[kind](result) if result is not None else None
        if result is None:
            continue
        text, where = _render(result)
        if lines and len(where) != len(set(lines)):
            continue  # a rewrite that merged two marked lines onto one cannot be checked
        out.append(Variant("+".join(chain), text, where))
    return out
