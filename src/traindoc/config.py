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


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for folder in [start, *start.parents] if start.is_dir() else [start.parent, *start.parent.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load(start: Path | None = None) -> Settings:
    """Settings from the nearest pyproject.toml at or above ``start`` (default: cwd)."""
    path = find_pyproject(start or Path.cwd())
    if path is None:
        return Settings()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}; fix the file or run from another folder") from None
    table = data.get("tool", {}).get("traindoc", {})
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [tool.traindoc] must be a table")
    select = table.get("select")
    return Settings(
        select=tuple(select) if select is not None else None,
        ignore=tuple(table.get("ignore", ())),
        fail_on=table.get("fail-on"),
        detectors=dict(table.get("detectors", {})),
        path=str(path),
    )
