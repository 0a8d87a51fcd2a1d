"""``[tool.traindoc]`` in the nearest pyproject.toml above a linted file that has the table
(found by ``traindoc.config.find_table``, the loader every face shares).

    [tool.traindoc]
    select = ["masked-nonfinite", "constant-loss"]   # only these ids (default: all)
    ignore = ["checkpoint-not-atomic"]                # never these
    per-file-ignores = { "tests/*" = ["missing-zero-grad"] }

The same keys in a ``[tool.traindoc.lint]`` table apply to lint only and win over the shared
ones (``select`` in ``[tool.traindoc]`` may name detectors that have no lint rule; those are
simply not lint's). Patterns in ``per-file-ignores`` are globs matched against the file's path
relative to the pyproject.toml's directory.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from traindoc import config as shared
from traindoc.errors import UsageError


class ConfigError(ValueError):
    """A pyproject.toml that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Config:
    root: Path | None = None  # the directory of the pyproject.toml it came from
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = field(default_factory=tuple)

    def ignored_for(self, path: Path) -> set[str]:
        """Ids ignored for ``path`` by ``per-file-ignores``."""
        if not self.per_file_ignores or self.root is None:
            return set()
        try:
            rel = path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            rel = path.as_posix()
        out: set[str] = set()
        for pattern, ids in self.per_file_ignores:
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(path.name, pattern):
                out |= set(ids)
        return out


_cache: dict[Path, Config] = {}


def for_path(path: Path) -> Config:
    """The config that applies to ``path``: the ``[tool.traindoc]`` table that
    ``traindoc.config.find_table`` finds for it (the same one every other face reads), or the
    defaults."""
    start = path.resolve()
    directory = start if start.is_dir() else start.parent
    if directory not in _cache:
        try:
            found = shared.find_table(directory)
        except UsageError as e:
            raise ConfigError(str(e)) from None
        _cache[directory] = Config() if found is None else _read(*found)
    return _cache[directory]


def _read(path: Path, table: dict[str, object]) -> Config:
    """A table ``find_table`` has checked: known keys, values of their types, known ids."""
    lint = table.get("lint", {})
    assert isinstance(lint, dict)
    merged = {**{k: v for k, v in table.items() if k != "lint"}, **lint}
    select = merged.get("select")
    per_file = merged.get("per-file-ignores", {})
    return Config(
        root=path.parent.resolve(),
        select=None if select is None else _ids(select),
        ignore=_ids(merged.get("ignore", [])),
        per_file_ignores=tuple((str(pattern).replace(os.sep, "/"), _ids(ids)) for pattern, ids in per_file.items()),
    )


def _ids(value: object) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(cast("list[str]", value))


def clear_cache() -> None:
    _cache.clear()
