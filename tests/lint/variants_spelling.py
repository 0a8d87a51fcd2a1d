"""Variant kinds that respell values and calls: literals from constants, a dataclass, argparse
or a dict config; torch imported bare or aliased; method form for function form; objects
renamed; arguments by keyword."""

from __future__ import annotations

import ast
import copy
from typing import Callable

from variants_ast import (
    MARK, Replace, after_imports, bound_names, loaded_names,
)


PATH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".tmp", ".partial")


DTYPES = ("bfloat16", "float16", "half")


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
    Replace({id(s): ast.Name(n, ast.Load()) for s, n in zip(sites, names)}).visit(tree)
    after_imports(tree, defs)
    return tree


def config(tree: ast.Module) -> ast.Module | None:
    """Numbers, paths and dtypes read from a dataclass config's field defaults (``cfg.value_1``)."""
    sites: list[ast.AST] = [*_literal_sites(tree), *_dtype_sites(tree)]
    if not sites or "cfg" in bound_names(tree) | set(loaded_names([tree])):
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
    Replace({
        id(s): ast.Attribute(ast.Name("cfg", ast.Load()), n, ast.Load()) for s, n in zip(sites, names)
    }).visit(tree)
    tree.body.insert(0, ast.ImportFrom("dataclasses", [ast.alias("dataclass")], 0))
    if isinstance(sites[-1], ast.Attribute) and "torch" not in bound_names(tree):
        tree.body.insert(0, ast.Import([ast.alias("torch")]))
    after_imports(tree, cls)
    return tree


def argparse_args(tree: ast.Module) -> ast.Module | None:
    """Numbers and paths read from ``args`` with the literal as the argument's default."""
    sites = _literal_sites(tree)
    if not sites or "args" in bound_names(tree) | set(loaded_names([tree])):
        return None
    names = _literal_names(sites)
    lines = ["parser = argparse.ArgumentParser()"]
    for n, s in zip(names, sites):
        lines.append(f"parser.add_argument('--{n}', type={type(s.value).__name__}, default={s.value!r})")
    lines.append("args = parser.parse_args()")
    Replace({
        id(s): ast.Attribute(ast.Name("args", ast.Load()), n, ast.Load()) for s, n in zip(sites, names)
    }).visit(tree)
    tree.body.insert(0, ast.Import([ast.alias("argparse")]))
    after_imports(tree, ast.parse("\n".join(lines)).body)
    return tree


def dict_config(tree: ast.Module) -> ast.Module | None:
    """Numbers and paths read from a config dict (``CONFIG["value_1"]``), as YAML-loaded
    configs are."""
    sites = _literal_sites(tree)
    if not sites or "CONFIG" in bound_names(tree):
        return None
    names = _literal_names(sites)
    pairs = ", ".join(f"{n!r}: {s.value!r}" for n, s in zip(names, sites))
    Replace({
        id(s): ast.Subscript(ast.Name("CONFIG", ast.Load()), ast.Constant(n), ast.Load())
        for s, n in zip(sites, names)
    }).visit(tree)
    after_imports(tree, ast.parse(f"CONFIG = {{{pairs}}}").body)
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
    taken = bound_names(tree) | set(loaded_names([tree]))
    calls = [c for c in calls if rename(c[2]) not in taken]
    if not calls:
        return None
    imports: dict[tuple[str, str], str] = {}
    table: dict[int, ast.expr] = {}
    for node, module, name in calls:
        local = rename(name)
        imports[(module, name)] = local
        table[id(node)] = ast.Name(local, ast.Load())
    Replace(table).visit(tree)
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
    if not table or set(table.values()) & (bound_names(tree) | set(loaded_names([tree]))):
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
    if "torch" not in bound_names(tree):
        tree.body.insert(0, ast.Import([ast.alias("torch")]))
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
    taken = bound_names(tree) | set(loaded_names([tree]))
    if set(RENAMES.values()) & taken:
        return None
    own = {s.name for s in ast.walk(tree) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    t = _Rename(own)
    t.visit(tree)
    return tree if t.changed else None


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


def annotate(tree: ast.Module) -> ast.Module | None:
    """Typed code: every parameter annotated (``model: Any``), as typed training code is."""
    changed = False
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]:
                if a.annotation is None and a.arg not in ("self", "cls"):
                    a.annotation = ast.Name("Any", ast.Load())
                    changed = True
    if not changed or "Any" in bound_names(tree):
        return None
    tree.body.insert(0, ast.ImportFrom("typing", [ast.alias("Any")], 0))
    return tree
