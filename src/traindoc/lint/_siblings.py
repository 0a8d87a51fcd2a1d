"""Follow calls into sibling modules: ``from utils import accumulate_and_step`` or ``from .trainer
import Trainer`` in a script whose folder holds ``utils.py`` / ``trainer.py``.

The functions and classes the script imports from a sibling, and those of the sibling they
name in turn, are parsed and appended to the script's tree below its last line, with the
sibling's own imports, as if the script defined them. Every rule then follows a call into them
as it follows a call into a function of the same file. ``Origins`` maps a line of that
extended tree back to the sibling's file and line, so a finding inside the sibling is reported
where it is written. A sibling is left out (the script is linted alone, as before) when one of
its definitions would clash with a name the script defines itself, or when it cannot be read.
"""

from __future__ import annotations

import ast
import os
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

# A cheap test before anything else: does the source import a module at all?
_IMPORT = re.compile(r"^[ \t]*(?:from|import)[ \t]", re.MULTILINE)
_WORD = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.MULTILINE)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_IMPORTS = (ast.Import, ast.ImportFrom)


@dataclass
class Sibling:
    """A sibling module, parsed: its top-level definitions and imports as line spans."""

    path: Path
    lines: list[str]
    defs: dict[str, ast.stmt]
    imports: list[ast.Import | ast.ImportFrom]
    refs: dict[str, set[str]] = field(default_factory=dict)  # definition -> others it names

    def named_by(self, name: str) -> set[str]:
        """The other top-level definitions the definition ``name`` names (computed once)."""
        found = self.refs.get(name)
        if found is None:
            # The words of its source that are not attributes: a few more than its names (a
            # word in a string), many times faster than walking its tree.
            node = self.defs[name]
            text = "".join(self.lines[node.lineno - 1 : node.end_lineno or node.lineno])
            found = self.refs[name] = {w for w in _WORD.findall(text) if w in self.defs and w != name}
        return found


@dataclass
class Origins:
    """Where the appended lines come from: (first line in the extended tree, first line in
    the sibling, number of lines, the sibling's path) per appended block."""

    base: int  # lines of the script itself
    blocks: list[tuple[int, int, int, Path]] = field(default_factory=list)

    def locate(self, line: int) -> tuple[Path | None, int]:
        """(the sibling's path, its line) for a line of the extended tree; (None, line) for
        a line of the script."""
        if line <= self.base:
            return None, line
        for start, original, count, path in self.blocks:
            if start <= line < start + count:
                return path, original + (line - start)
        return None, line


class SiblingCache:
    """Siblings parsed once per ``lint_paths`` call (a folder's ``utils.py`` serves every
    script of the folder)."""

    def __init__(self) -> None:
        self._parsed: dict[Path, Sibling | None] = {}
        self._listed: dict[Path, set[str]] = {}

    def modules(self, folder: Path) -> set[str]:
        """The names of the Python modules in ``folder`` (``utils`` for ``utils.py``)."""
        if folder not in self._listed:
            try:
                self._listed[folder] = {
                    e.name[:-3] for e in os.scandir(folder) if e.name.endswith(".py") and e.is_file()
                }
            except OSError:
                self._listed[folder] = set()
        return self._listed[folder]

    def get(self, path: Path) -> Sibling | None:
        if path not in self._parsed:
            self._parsed[path] = _parse(path)
        return self._parsed[path]


def _parse(path: Path) -> Sibling | None:
    try:
        with tokenize.open(path) as f:
            text = f.read()
        tree = ast.parse(text, filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return None
    defs: dict[str, ast.stmt] = {}
    imports: list[ast.Import | ast.ImportFrom] = []
    for stmt in tree.body:
        if isinstance(stmt, _DEFS):
            defs[stmt.name] = stmt
        elif isinstance(stmt, _IMPORTS):
            imports.append(stmt)
    return Sibling(path, text.splitlines(keepends=True), defs, imports)


@dataclass
class Linked:
    """What ``link`` appended: the extended source (the script, then the appended lines, so that
    the line numbers of the appended nodes point into it), the imported names now defined in
    the tree (local name -> the definition's name), the sibling modules imported whole (local
    name -> the definitions appended for them) and where the appended lines come from."""

    source: str
    names: dict[str, str]
    modules: dict[str, set[str]]
    origins: Origins


def link(tree: ast.Module, source: str, folder: Path | None, own: Path | None,
         cache: SiblingCache | None = None) -> Linked | None:
    """Append to ``tree`` (in place) what the script uses of its sibling modules: names
    imported from one (``from utils import f``, ``from .trainer import Trainer``) and
    attributes of one imported whole (``import utils`` then ``utils.f(...)``). None when the
    script uses no sibling."""
    if folder is None or not _IMPORT.search(source):
        return None
    cache = cache or SiblingCache()
    present = cache.modules(folder)
    if not present:
        return None
    mine = own.stem if own is not None else None
    wanted: dict[str, dict[str, str]] = {}  # sibling -> local name -> definition's name
    whole: dict[str, str] = {}  # local name -> sibling imported whole
    for stmt in _top_imports(tree):
        if isinstance(stmt, ast.ImportFrom) and stmt.level <= 1 and stmt.module in present and stmt.module != mine:
            for alias in stmt.names:
                wanted.setdefault(stmt.module, {})[alias.asname or alias.name] = alias.name
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 1 and not stmt.module:
            whole.update({a.asname or a.name: a.name for a in stmt.names if a.name in present and a.name != mine})
        elif isinstance(stmt, ast.Import):
            whole.update({a.asname or a.name: a.name for a in stmt.names if a.name in present and a.name != mine})
    for local, module in whole.items():
        for attr in re.findall(rf"(?<![\w.]){re.escape(local)}[ \t]*\.[ \t]*(\w+)", source):
            wanted.setdefault(module, {})[f"{local}.{attr}"] = attr
    if not wanted:
        return None
    defined = _defined_names(tree, source)
    aliases = import_targets(tree.body)
    base = len(source.splitlines())
    out = Linked("", {}, {}, Origins(base))
    chunks: list[str] = []
    line = base + 1
    for module, names in wanted.items():
        sib = cache.get(folder / f"{module}.py")
        if sib is None:
            continue
        if "*" in names.values():
            names = {n: n for n in sib.defs}
        closure = _closure(sib, {real for real in names.values() if real in sib.defs})
        if not closure or any(n in defined or _elsewhere(aliases.get(n), module) for n in closure) or any(
            local in defined for local, real in names.items() if real in closure
        ):
            continue  # nothing to follow, or a clash with the script's own names: lint it alone
        blocks: list[ast.stmt] = [s for s in sib.imports if _compatible(s, aliases, defined)]
        blocks += [sib.defs[n] for n in closure]
        blocks.sort(key=lambda s: s.lineno)
        for stmt in blocks:
            first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", ())])
            last = stmt.end_lineno or stmt.lineno
            text = "".join(sib.lines[first - 1 : last])
            if not text.endswith("\n"):
                text += "\n"
            out.origins.blocks.append((line, first, last - first + 1, sib.path))
            chunks.append(text)
            line += last - first + 1
        for local, real in names.items():
            if real not in closure:
                continue
            if "." in local:  # utils.f: the module's local name -> f
                out.modules.setdefault(local.partition(".")[0], set()).add(real)
            else:
                out.names[local] = real
    if not chunks:
        return None
    appended = "".join(chunks)
    try:  # parsed below `base` blank lines: the nodes get their line in the extended source
        extra = ast.parse("\n" * base + appended)
    except (SyntaxError, ValueError, RecursionError):  # a def cut oddly (a `;` on its last line)
        return None
    tree.body.extend(extra.body)
    out.source = (source if source.endswith("\n") or not source else source + "\n") + appended
    return out


def _elsewhere(target: str | None, module: str) -> bool:
    """The script imports a name from somewhere other than the sibling ``module``."""
    return target is not None and not target.lstrip(".").startswith(f"{module}.")


def _top_imports(tree: ast.Module) -> list[ast.stmt]:
    """Imports at the top level of the script, also those under a top-level ``if``/``try``."""
    out: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        stmt = todo.pop(0)
        if isinstance(stmt, _IMPORTS):
            out.append(stmt)
        elif isinstance(stmt, ast.If):
            todo += stmt.body + stmt.orelse
        elif isinstance(stmt, ast.Try):
            todo += stmt.body + [s for h in stmt.handlers for s in h.body] + stmt.orelse
    return out


def _defined_names(tree: ast.Module, source: str) -> set[str]:
    """Names of the functions and classes the script defines (at any depth: an appended
    definition of the same name would make calls to it ambiguous) and the names its top level
    assigns (an appended import must not rebind them)."""
    out = set(_DEF.findall(source))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            out |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return out


def import_targets(body: list[ast.stmt]) -> dict[str, str]:
    """local name -> what it imports, for the imports of a module body."""
    out: dict[str, str] = {}
    for stmt in body:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(stmt, ast.ImportFrom):
            base = "." * stmt.level + (stmt.module or "")
            for a in stmt.names:
                out[a.asname or a.name] = f"{base}.{a.name}"
    return out


def _compatible(stmt: ast.Import | ast.ImportFrom, script: dict[str, str], defined: set[str]) -> bool:
    """The sibling's import binds no name the script binds to something else or sets itself."""
    return all(
        script.get(local, target) == target and local not in defined
        for local, target in import_targets([stmt]).items()
    )


def _closure(sib: Sibling, start: set[str]) -> list[str]:
    """``start`` and the sibling's top-level definitions they name, transitively."""
    found = set(start)
    todo = list(start)
    while todo:
        for name in sib.named_by(todo.pop()):
            if name not in found:
                found.add(name)
                todo.append(name)
    return sorted(found, key=lambda n: sib.defs[n].lineno)
