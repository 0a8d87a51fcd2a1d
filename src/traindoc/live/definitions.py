"""Where a finding's parameters and layers are defined: the ``self.head = nn.Linear(...)`` line.

A finding names parameters and modules by their path in the model (``encoder.head.weight``). The
line the user edits to fix it is where that layer is assigned in its owner's class: the holder of
a parameter is followed up through torch's own layers and containers (a Linear's ``weight``, an
``nn.Sequential``'s ``0``, a ``ModuleList``'s index) to the first class of the user or of a
library, and that class's source (or a base class's) is searched for the assignment. Read once,
at the end of the run, for the names the findings quote; nothing here runs during training.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import replace
from typing import Any, Iterable

from traindoc.findings import Finding
from traindoc.live.objects import file_line

MAX_SITES = 3  # per finding: the layers a fix starts from, not an inventory


class Definitions:
    """The holders of the named parameters and modules of the watched models: ``objects`` maps
    each name (``head.weight``, ``encoder.layers.0``) to its parameter or module."""

    def __init__(self, objects: Iterable[tuple[Any, str]], modules: Iterable[Any]) -> None:
        self.by_name = {name: obj for obj, name in objects}
        self._holder: dict[int, tuple[Any, str]] = {}
        self._assigned: dict[tuple[type, str], str | None] = {}  # (class, attribute) -> its line
        for m in modules:
            for attr, child in m.named_children():
                self._holder.setdefault(id(child), (m, attr))
            for attr, p in m.named_parameters(recurse=False):
                self._holder.setdefault(id(p), (m, attr))

    def site(self, name: str) -> str | None:
        """``file:line`` of the assignment that made ``name``'s layer, or None when the source
        does not show it (a model built as an ``nn.Sequential`` in the script, a class made at
        run time)."""
        obj = self.by_name.get(name)
        for _ in range(16):
            found = self._holder.get(id(obj)) if obj is not None else None
            if found is None:
                return None
            holder, attr = found
            if not (_torch_own(type(holder)) or attr.isdigit()):
                key = (type(holder), attr)
                if key not in self._assigned:
                    self._assigned[key] = _assigned(*key)
                return self._assigned[key]
            obj = holder  # a layer's weight, a container's element: where the layer itself is assigned
        return None

    def add_sites(self, finding: Finding) -> Finding:
        """The finding with the definition sites of the names it quotes added to its ``where``."""
        sites: list[str] = []
        for name in finding.where:
            site = self.site(name) if name in self.by_name else None
            if site is not None and site not in sites and site not in finding.where:
                sites.append(site)
            if len(sites) == MAX_SITES:
                break
        if not sites:
            return finding
        return replace(finding, where=(*finding.where, *sites))


def _torch_own(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "torch"


def _assigned(cls: type, attr: str) -> str | None:
    """The first line of ``cls`` (or of a base class, nearest first) that assigns ``self.attr``
    (``self.attr = ...``, ``setattr(self, "attr", ...)``, ``self.add_module("attr", ...)``,
    ``self.register_parameter("attr", ...)``)."""
    for klass in cls.__mro__:
        if klass is object or _torch_own(klass):
            continue
        try:
            lines, start = inspect.getsourcelines(klass)
            path = inspect.getsourcefile(klass)
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError, SyntaxError):
            continue
        found = [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.stmt, ast.expr)) and _assigns(n, attr)]
        if found and path:
            return file_line(path, start + min(found) - 1)
    return None


def _assigns(node: ast.AST, attr: str) -> bool:
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        return any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                   and t.value.id == "self" for t in flat)
    if isinstance(node, ast.Call):
        func, args = node.func, node.args
        if isinstance(func, ast.Name) and func.id == "setattr":
            return len(args) > 1 and _text(args[1]) == attr
        return isinstance(func, ast.Attribute) and func.attr in (
            "add_module", "register_module", "register_parameter", "register_buffer") and bool(args) \
            and _text(args[0]) == attr
    return False


def _text(node: ast.expr) -> object:
    return node.value if isinstance(node, ast.Constant) else None
