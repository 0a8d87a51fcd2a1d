"""The unit through which lint follows names: a function body (``Scope``) and the backward
passes found in it (``Backward``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Union

from traindoc.lint._nodes import contains_word, unparse

if TYPE_CHECKING:
    from traindoc.lint._index import IndexedFile

ScopeNode = Union[ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda]
# What a name is assigned: the expression; for ``x += ...`` the statement itself.
AssignValue = Union[ast.expr, ast.AugAssign]


@dataclass
class Backward:
    """One backward pass: ``loss`` is the expression handed to it."""

    call: ast.Call
    loss: ast.expr
    # "tensor" (loss.backward()), "scaler" (scaler.scale(loss).backward()), "wrapper"
    # (accelerator.backward(loss)), "autograd" (torch.autograd.backward), "dist_autograd" (RPC)
    via: str
    owner: str | None = None  # the scaler or wrapper (accelerator, fabric, engine) by name
    shown: str = ""  # the call as written in the source

    @property
    def name(self) -> str | None:
        return self.loss.id if isinstance(self.loss, ast.Name) else None

    def text(self) -> str:
        return self.shown or unparse(self.call)


@dataclass
class Scope:
    """A function body (or the module body): the unit through which names are followed."""

    node: ScopeNode
    name: str
    cls: str | None = None
    calls: list[ast.Call] = field(default_factory=list)
    assigns: list[tuple[str, ast.stmt, AssignValue]] = field(default_factory=list)
    withs: list[ast.With | ast.AsyncWith] = field(default_factory=list)
    loops: list[ast.stmt] = field(default_factory=list)
    returns: list[ast.Return] = field(default_factory=list)
    trys: list[ast.Try] = field(default_factory=list)
    ifs: list[ast.If] = field(default_factory=list)
    backwards: list[Backward] = field(default_factory=list)
    trained: set[str] = field(default_factory=set)  # names whose value is handed to backward

    def values_of(self, name: str, before: int | None = None) -> list[tuple[ast.stmt, AssignValue]]:
        """Assignments ``name = value`` in this scope (in source order), optionally before a line.

        An augmented assignment ``name /= n`` is given as the statement itself.
        """
        return [
            (stmt, value)
            for target, stmt, value in self.assigns
            if target == name and (before is None or stmt.lineno < before)
        ]

    def closure(self, names: Iterable[str],
                follow: Callable[[str, ast.stmt, AssignValue], Iterable[str]]) -> set[str]:
        """``names`` and every name ``follow`` gives for an assignment to one of them, again
        and again."""
        out = set(names)
        todo = list(out)
        while todo:
            name = todo.pop()
            for stmt, value in self.values_of(name):
                for n in follow(name, stmt, value):
                    if n not in out:
                        out.add(n)
                        todo.append(n)
        return out

    def reaching(self, name: str, line: int, mod: IndexedFile | None = None) -> ast.expr | None:
        """The value of the last plain assignment to ``name`` before ``line``; with ``mod``,
        the last one not hidden in a branch (``if``/``try``) that ``line`` is outside of."""
        # Plain assignments: the value of an augmented one is its statement (s is v).
        found = [(s, v) for s, v in self.values_of(name, line) if not isinstance(v, ast.AugAssign)]
        if mod is not None:
            for stmt, value in reversed(found):
                if not any(
                    isinstance(a, (ast.If, ast.Try)) and not (a.lineno <= line <= (a.end_lineno or a.lineno))
                    for a in mod.ancestors(stmt)
                ):
                    return value
        return found[-1][1] if found else None

    @property
    def is_eval(self) -> bool:
        return contains_word(self.name, ("eval", "valid", "test", "metric", "predict", "infer"))

