"""What the variant kinds share: the names a snippet binds and reads, its parts, small AST
builders and the mark that tracks where an invalid example must fire."""

from __future__ import annotations

import ast
import builtins
from typing import Iterable

MARK = "_traindoc_mark"


# Modules a snippet may use without importing them: never parameters or attributes of self.
MODULES = frozenset({"torch", "nn", "F", "np", "math", "dist", "os", "copy"})


BUILTINS = frozenset(dir(builtins)) | MODULES


def is_import(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.Import, ast.ImportFrom))


def is_def(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))


def bound_names(tree: ast.AST) -> set[str]:
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


def loaded_names(nodes: Iterable[ast.AST]) -> list[str]:
    seen: list[str] = []
    for top in nodes:
        for n in ast.walk(top):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in seen:
                seen.append(n.id)
    return seen


def free_names(tree: ast.Module) -> list[str]:
    """Names the example uses without defining them (``model``, ``optimizer``, ``loader``)."""
    bound = bound_names(tree)
    return [n for n in loaded_names([tree]) if n not in bound and n not in BUILTINS]


def split_module(tree: ast.Module) -> tuple[list[ast.stmt], list[ast.stmt], list[ast.stmt]]:
    imports = [s for s in tree.body if is_import(s)]
    defs = [s for s in tree.body if is_def(s)]
    rest = [s for s in tree.body if not is_import(s) and not is_def(s)]
    return imports, defs, rest


def call_stmt(name: str, args: list[str]) -> ast.Expr:
    return ast.Expr(ast.Call(ast.Name(name, ast.Load()), [ast.Name(a, ast.Load()) for a in args], []))


def function_def(name: str, params: list[str], body: list[ast.stmt]) -> ast.FunctionDef:
    fn = ast.parse(f"def {name}({', '.join(params)}):\n    pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    fn.body = body or [ast.Pass()]
    return fn


def unique_name(base: str, taken: set[str]) -> str:
    name, i = base, 2
    while name in taken:
        name, i = f"{base}{i}", i + 1
    return name


class Replace(ast.NodeTransformer):
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


def after_imports(tree: ast.Module, stmts: list[ast.stmt]) -> None:
    i = 0
    while i < len(tree.body) and is_import(tree.body[i]):
        i += 1
    tree.body[i:i] = stmts


def first_for(tree: ast.Module) -> tuple[ast.For, list[ast.stmt]] | None:
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


def position_of(n: ast.AST) -> tuple[int, int]:
    return (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))
