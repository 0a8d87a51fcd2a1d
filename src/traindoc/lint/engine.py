"""Run the lint rules over files: parse once, run every selected rule, turn hits into findings.

A file that does not parse, cannot be read, or makes a rule crash becomes a ``LintError`` for
that file; the other files (and the other rules) still run.
"""

from __future__ import annotations

import os
import re
import stat
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Literal

from traindoc import catalog
from traindoc.findings import Finding, severity_rank
from traindoc.lint import config as config_mod
from traindoc.lint._ast import Module
from traindoc.lint._siblings import Origins, SiblingCache
from traindoc.lint.rules import RULES
from traindoc.progress import Progress
from traindoc.report import safe

SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "env", ".env", ".tox", ".nox",
     "node_modules", "site-packages", "build", "dist", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
)
SUPPRESS = re.compile(r"#\s*traindoc:\s*ignore(?:\[([^\]]*)\])?", re.IGNORECASE)


class UsageError(ValueError):
    """Bad input from the user (a path that does not exist, an unknown id): exit code 2."""


@dataclass(frozen=True)
class LintFinding:
    """A catalog finding and where in the source it was found (1-based line and column)."""

    finding: Finding
    path: str
    line: int
    col: int

    def to_dict(self) -> dict[str, object]:
        out = self.finding.to_dict()
        out.update(path=self.path, line=self.line, col=self.col)
        return out


@dataclass(frozen=True)
class LintError:
    path: str
    line: int | None
    message: str
    kind: Literal["parse", "read", "internal"]

    def render(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return safe.terminal(f"Error: {where}: {self.message}")


@dataclass
class LintResult:
    findings: list[LintFinding] = field(default_factory=list)
    errors: list[LintError] = field(default_factory=list)
    files: int = 0  # files read and parsed

    @property
    def exit_code(self) -> int:
        """1 when there are findings; else 2 when some file could not be linted; else 0."""
        if self.findings:
            return 1
        return 2 if self.errors else 0


def lint_source(
    source: str,
    path: str = "<string>",
    *,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] = (),
    folder: str | os.PathLike[str] | None = None,
    siblings: SiblingCache | None = None,
) -> tuple[list[LintFinding], list[LintError]]:
    """Lint one file's text. ``select``/``ignore`` choose rules by id. With ``folder`` (the
    file's own), calls into functions and classes it imports from sibling modules there are
    followed, and a finding inside a sibling is reported at the sibling's path and line."""
    try:
        mod = Module(source, path, folder=None if folder is None else Path(folder), siblings=siblings)
    except SyntaxError as e:
        msg = f"cannot parse: {e.msg}"
        return [], [LintError(path, e.lineno, msg, "parse")]
    except ValueError as e:  # source with NUL bytes
        return [], [LintError(path, None, f"cannot parse: {e}", "parse")]
    except RecursionError:  # `x = 1+1+...` of 20,000 terms, `a.a.a...` 30,000 long
        return [], [LintError(path, None, "cannot parse: an expression nests too deeply for Python's "
                              "parser (python itself raises RecursionError compiling this file)", "parse")]
    chosen = None if select is None else set(select)
    muted = set(ignore)
    suppressed = _suppressions(mod.source)  # with the siblings' lines, when any were appended
    origins = mod.origins
    found: dict[tuple[str, int, int], LintFinding] = {}
    errors: list[LintError] = []
    for cls in RULES:
        id_ = cls.id
        if id_ in muted or (chosen is not None and id_ not in chosen):
            continue
        try:
            hits = list(cls().check(mod))
        except Exception as e:  # a crashing rule is a result, not a crash of the run
            errors.append(
                LintError(path, None, f"internal error in lint rule {id_}: {type(e).__name__}: {e} "
                          "(please report this with the file)", "internal")
            )
            continue
        for hit in hits:
            ids = suppressed.get(hit.line)
            if ids is not None and (not ids or id_ in ids):
                continue
            key = (id_, hit.line, hit.col)
            if key not in found:
                # imported here: the catalog is only read once something is found
                from traindoc.catalog import finding

                where, line = path, hit.line
                message, cause, fix = hit.message, hit.cause, hit.fix
                if origins is not None:
                    sibling, line = origins.locate(hit.line)
                    if sibling is not None:
                        where = display_path(sibling)
                    message, cause, fix = (_relocate(t, origins) for t in (message, cause, fix))
                f = finding(id_, message=message, cause=cause, fix=fix, where=(f"{where}:{line}",))
                found[key] = LintFinding(f, where, line, hit.col)
    return sorted(found.values(), key=lambda f: (f.path != path, f.path, f.line, f.col, f.finding.id)), errors


_LINE = re.compile(r"\bline (\d+)\b")


def _relocate(text: str, origins: Origins) -> str:
    """``line 1234`` in a message, when 1234 is a line appended from a sibling module:
    ``utils.py line 45``."""
    def where(m: re.Match[str]) -> str:
        sibling, line = origins.locate(int(m.group(1)))
        return m.group(0) if sibling is None else f"{sibling.name} line {line}"

    return _LINE.sub(where, text) if "line " in text else text


def lint_paths(
    paths: Iterable[str | os.PathLike[str]],
    *,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] = (),
    use_config: bool = True,
) -> LintResult:
    """Lint files and directories (recursively, ``*.py``). ``select`` given here replaces the
    config's; ``ignore`` adds to it."""
    cli_select = None if select is None else tuple(select)
    cli_ignore = tuple(ignore)
    _check_ids(cli_select or ())
    _check_ids(cli_ignore)
    result = LintResult()
    siblings = SiblingCache()
    with Progress("traindoc lint") as progress:
        for i, file in enumerate(iter_files(paths)):
            progress.update(i, display_path(file))
            _lint_file(file, result, cli_select, cli_ignore, use_config, siblings)
    # A finding inside a sibling module is found again from each script that calls into it.
    unique = {(f.finding.id, f.path, f.line, f.col): f for f in reversed(result.findings)}
    if len(unique) < len(result.findings):
        result.findings = [f for f in result.findings if unique.get((f.finding.id, f.path, f.line, f.col)) is f]
    return result


def _lint_file(file: Path, result: LintResult, cli_select: tuple[str, ...] | None,
               cli_ignore: tuple[str, ...], use_config: bool, siblings: SiblingCache | None = None) -> None:
    """Lint one file into ``result``."""
    shown = display_path(file)
    cfg = config_mod.for_path(file) if use_config else config_mod.Config()
    chosen = cli_select if cli_select is not None else cfg.select
    muted = set(cli_ignore) | set(cfg.ignore) | cfg.ignored_for(file)
    if not _regular(file):  # a FIFO or a device: opening it would block, or never end
        result.errors.append(LintError(shown, None, "not a regular file (a FIFO, socket or device); "
                                       "lint reads Python source files", "read"))
        return
    try:
        with tokenize.open(file) as f:  # honours a coding cookie
            source = f.read()
    except (OSError, UnicodeDecodeError, SyntaxError) as e:
        result.errors.append(LintError(shown, None, f"cannot read: {e}", "read"))
        return
    findings, errors = lint_source(source, shown, select=chosen, ignore=muted, folder=file.parent, siblings=siblings)
    if not any(e.kind == "parse" for e in errors):
        result.files += 1
    result.findings += findings
    result.errors += errors


def iter_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    """Every file to lint, in a stable order; UsageError for a path that does not exist."""
    given = [Path(p) for p in paths]
    for p in given:
        if not p.exists():
            raise UsageError(f"path '{p}' does not exist")
    seen: set[Path] = set()
    for p in given:
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
                for name in sorted(files):
                    if name.endswith(".py"):
                        file = Path(root) / name
                        if file.resolve() not in seen:
                            seen.add(file.resolve())
                            yield file
        elif p.resolve() not in seen:
            seen.add(p.resolve())
            yield p


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return True  # opening it says what is wrong


def display_path(path: Path, base: Path | None = None) -> str:
    """The path relative to ``base`` (the working directory) when it is below it, else absolute."""
    try:
        return path.resolve().relative_to((base or Path.cwd()).resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def _suppressions(source: str) -> dict[int, set[str]]:
    """line -> ids silenced on it by ``# traindoc: ignore[id, ...]`` (empty set: all)."""
    if "traindoc" not in source:
        return {}
    out: dict[int, set[str]] = {}
    for number, text in enumerate(source.splitlines(), 1):
        if "#" not in text:
            continue
        for m in SUPPRESS.finditer(text):
            ids = {i.strip() for i in (m.group(1) or "").split(",") if i.strip()}
            if number in out and (not out[number] or not ids):
                out[number] = set()
            else:
                out.setdefault(number, set()).update(ids)
    return out


def _check_ids(ids: Iterable[str]) -> None:
    for id_ in ids:
        try:
            catalog.get(id_)
        except KeyError as e:
            raise UsageError(e.args[0]) from None


def summary(result: LintResult) -> str:
    """``3 findings in 2 files (2 error, 1 warning)``."""
    n = len(result.findings)
    if not n:
        checked = f"{result.files} file" + ("s" if result.files != 1 else "")
        return f"No findings ({checked} checked)."
    files = len({f.path for f in result.findings})
    counts: dict[str, int] = {}
    for f in sorted(result.findings, key=lambda f: severity_rank(f.finding.severity)):
        counts[f.finding.severity] = counts.get(f.finding.severity, 0) + 1
    parts = ", ".join(f"{c} {s}" for s, c in counts.items())
    return (
        f"{n} finding{'s' if n != 1 else ''} in {files} file{'s' if files != 1 else ''} ({parts})"
    )


def lint_ids() -> list[str]:
    return [cls.id for cls in RULES]
