"""Semantics-preserving respellings of lint rule examples (metamorphic tests).

Each variant kind rewrites an example's AST into code that does the same thing, written the way
other people write it: the loop moved into a helper function or into a ``Trainer`` method,
literals read from a module constant, a dataclass config or argparse defaults, torch imported
bare or under another name, method-form instead of function-form calls, the loop over
``enumerate`` or a list, the loop body in a ``train_step`` helper. A kind that does not apply to
an example returns None. The kinds that move code are in ``variants_structure``, those that
respell values and calls in ``variants_spelling``, what they share in ``variants_ast``.

Where an invalid example must fire is tracked through the rewrite: the first node on each
expected line is tagged, the rewritten tree is unparsed and parsed again, and the two trees
are walked side by side to read the tagged node's new line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Iterable

from variants_ast import MARK
from variants_spelling import (
    alias_import, alias_module, annotate, argparse_args, bare_import, config, constants, dict_config, kwargs_call,
    method_form, rename_objects,
)
from variants_structure import (
    enumerate_loop, helper, list_loop, local_imports, main_guard, method, self_as_param, self_locals, static_method,
    step_helper, while_loop,
)

@dataclass(frozen=True)
class Variant:
    kind: str
    code: str
    lines: tuple[int, ...]


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
    "annotate": annotate,
}


# Two rewrites in a row, each a spelling the issue names (a class reading self.cfg, ...).
COMBOS = [
    ("config", "method"), ("argparse", "helper"), ("alias_module", "method"), ("step_helper", "method"),
    ("list_loop", "helper"), ("method_form", "method"), ("constants", "step_helper"),
    ("rename_objects", "method"), ("bare_import", "helper"), ("dict_config", "main_guard"),
    ("while_loop", "method"), ("method", "self_locals"), ("local_imports", "method"),
    ("kwargs_call", "method"), ("rename_objects", "static_method"), ("self_locals", "alias_module"),
    ("rename_objects", "self_locals"), ("method", "annotate"), ("annotate", "alias_module"),
    ("rename_objects", "bare_import"),
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
