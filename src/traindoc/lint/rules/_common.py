"""What every lint rule shares: its shape, the result it yields and the examples it carries."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable, Protocol

if TYPE_CHECKING:
    from traindoc.lint._flow import Module


@dataclass(frozen=True)
class Hit:
    """One place where a rule fires. ``node`` gives the line and column; the message names
    the user's own objects; ``cause`` and ``fix`` complete the finding."""

    node: ast.AST
    message: str
    cause: str
    fix: str

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 1)

    @property
    def col(self) -> int:
        return getattr(self.node, "col_offset", 0) + 1


@dataclass(frozen=True)
class Invalid:
    """A snippet on which the rule must fire, at exactly these lines (1-based, in the snippet
    after ``textwrap.dedent``) and nowhere else."""

    code: str
    lines: tuple[int, ...]

    def __init__(self, code: str, *lines: int) -> None:
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "lines", tuple(lines))


class Rule(Protocol):
    """The shape of every class in ``RULES`` (the registry test checks each). Rules are plain
    classes and inherit from nothing; each is built with no arguments for each file it checks.

    ``id`` is the catalog id, also the module's name; ``invalid`` snippets must fire at their
    lines and ``valid`` ones stay quiet (the tests and the docs); ``check`` yields a ``Hit`` per
    place it fires. Optional: ``cause_of``, the ids of failures whose cause in source this rule
    finds while reporting its own id (``traindoc explain ID --where`` lists it under them).
    """

    id: ClassVar[str]
    invalid: ClassVar[tuple[Invalid, ...]]
    valid: ClassVar[tuple[str, ...]]

    def check(self, mod: Module) -> Iterable[Hit]: ...


def snippet(code: str) -> str:
    """An example's source as linted: dedented, leading blank lines dropped (line 1 is the
    first line of code)."""
    import textwrap  # only the examples need it, not a lint run's start

    return textwrap.dedent(code).lstrip("\n")
