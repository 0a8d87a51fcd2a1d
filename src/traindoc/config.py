"""``[tool.traindoc]`` in pyproject.toml: select/ignore by id and per-detector thresholds.

    [tool.traindoc]
    ignore = ["slow-eval"]
    fail-on = "error"
    [tool.traindoc.detectors.loss-spike]
    factor = 4.0
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from traindoc.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    fail_on: str | None = None
    detectors: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    path: str = ""  # the pyproject.toml it came from


def find_table(start: Path) -> tuple[Path, dict[str, object]] | None:
    """The one loader of ``[tool.traindoc]``, shared by every face: the nearest pyproject.toml
    at or above ``start`` (a file or a folder) that has the table, with the table. A
    pyproject.toml without it (a sub-package's own) is passed over, as ruff does with
    ``[tool.ruff]``; None when no folder above has one."""
    start = start.resolve()
    directory = start if start.is_dir() else start.parent
    for folder in [directory, *directory.parents]:
        candidate = folder / "pyproject.toml"
        if not candidate.is_file():
            continue
        try:
            text = candidate.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {candidate}: {exc}; fix the file or run from another folder") from None
        if "traindoc" not in text:
            continue  # no table here: skip parsing (most pyproject.toml files)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"cannot read {candidate}: {exc}; fix the file or run from another folder") from None
        tool = data.get("tool", {})
        table = tool.get("traindoc") if isinstance(tool, dict) else None
        if table is None:
            continue
        if not isinstance(table, dict):
            raise UsageError(f"{candidate}: [tool.traindoc] must be a table")
        return candidate, table
    return None


def load(start: Path | None = None) -> Settings:
    """Settings from the nearest pyproject.toml with a ``[tool.traindoc]`` table at or above
    ``start`` (default: cwd)."""
    found = find_table(start or Path.cwd())
    if found is None:
        return Settings()
    path, table = found
    select = table.get("select")
    ignore = table.get("ignore", ())
    detectors = table.get("detectors", {})
    fail_on = table.get("fail-on")
    if not isinstance(ignore, (list, tuple)) or not isinstance(detectors, dict):
        raise UsageError(f"{path}: [tool.traindoc] ignore must be a list of ids and detectors a table")
    return Settings(
        select=tuple(select) if isinstance(select, (list, tuple)) else None,
        ignore=tuple(ignore),
        fail_on=fail_on if isinstance(fail_on, str) else None,
        detectors=dict(detectors),
        path=str(path),
    )
