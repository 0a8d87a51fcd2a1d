"""``[tool.traindoc]`` in pyproject.toml: select/ignore by id and per-detector thresholds.

    [tool.traindoc]
    ignore = ["slow-eval"]
    fail-on = "error"
    [tool.traindoc.detectors.loss-spike]
    factor = 4.0

The keys are those of ``_KEYS`` (lint's own in ``traindoc.lint.config``). The table is checked
whole when it is found, for every face: an unknown key, a value of the wrong type, an unknown
id or severity, a threshold its detector's Config refuses is a UsageError naming the file and
the key, never a default taken in silence.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from traindoc.errors import UsageError, too_deep

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


def autostart_enabled() -> bool:
    """Is ``TRAINDOC`` set to something that means on (``TRAINDOC=1 python train.py``: the live
    doctor with no code change)? The .pth line setup.py installs makes the same test."""
    return os.environ.get("TRAINDOC", "").strip().lower() not in ("", "0", "false", "no", "off")


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
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {candidate}: {exc}; fix the file or run from another folder") from None
        if "traindoc" not in text:
            continue  # no table here: skip parsing (most pyproject.toml files)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"cannot read {candidate}: {exc}{_quoted_line(text, str(exc))}; fix the file "
                             "or run from another folder") from None
        except RecursionError:  # `x = [[[[...` thousands deep
            raise too_deep(candidate, "fix the file or run from another folder") from None
        tool = data.get("tool", {})
        table = tool.get("traindoc") if isinstance(tool, dict) else None
        if table is None:
            continue
        if not isinstance(table, dict):
            raise UsageError(f"{candidate}: [tool.traindoc] must be a table")
        check_table(candidate, table)
        return candidate, table
    return None


def _quoted_line(text: str, error: str) -> str:
    """`` in `ignore = [`` : the line a TOML error points at, so the message names the key."""
    import re

    found = re.search(r"at line (\d+)", error)
    lines = text.splitlines()
    if not found or not 0 < int(found.group(1)) <= len(lines):
        return ""
    line = lines[int(found.group(1)) - 1].strip()
    return f" in `{line[:60]}{'...' if len(line) > 60 else ''}`" if line else ""


def load(start: Path | None = None) -> Settings:
    """Settings from the nearest pyproject.toml with a ``[tool.traindoc]`` table at or above
    ``start`` (default: cwd)."""
    found = find_table(start or Path.cwd())
    if found is None:
        return Settings()
    path, table = found
    select = table.get("select")
    fail_on = table.get("fail-on")
    detectors = _detector_tables(path, table.get("detectors", {}))
    return Settings(
        select=None if select is None else _ids(path, "select", select),
        ignore=_ids(path, "ignore", table.get("ignore", [])),
        fail_on=fail_on if isinstance(fail_on, str) else None,
        detectors=detectors,
        path=str(path),
    )


# Every key of [tool.traindoc] and what its value must be; anything else is refused by name, so
# a typo (`fail_on`, `ignores`) is never silently a default.
_KEYS = {"select": "a list of failure ids", "ignore": "a list of failure ids",
         "fail-on": 'one of "error", "warning", "info"', "detectors": "a table of [tool.traindoc.detectors.ID] tables",
         "per-file-ignores": "a table of pattern = [failure ids]", "lint": "a table"}
_LINT_KEYS = ("select", "ignore", "per-file-ignores")


def check_table(path: Path, table: Mapping[str, object], where: str = "[tool.traindoc]") -> None:
    """UsageError naming the file and the key for an unknown key, a value of the wrong type,
    an unknown failure id, an unknown severity, or a detector threshold its Config refuses."""
    from traindoc.findings import SEVERITIES

    known = _KEYS if where == "[tool.traindoc]" else {k: _KEYS[k] for k in _LINT_KEYS}
    for key, value in table.items():
        if key not in known:
            raise UsageError(f"{path}: {where} has an unknown key {key!r}{_did_you_mean(key, known)}; "
                             f"the keys are {', '.join(known)}")
        if key in ("select", "ignore"):
            _ids(path, f"{where} {key}", value)
        elif key == "fail-on" and value not in SEVERITIES:
            raise UsageError(f"{path}: {where} fail-on must be {_KEYS[key]}, got {value!r}")
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise UsageError(f"{path}: {where} per-file-ignores must be {_KEYS[key]}")
            for pattern, ids in value.items():
                _ids(path, f"{where} per-file-ignores.{pattern!r}", ids)
        elif key == "detectors":  # checked for every face, lint too: a typo there is still a typo
            if not isinstance(value, dict):
                raise UsageError(f"{path}: {where} detectors must be {_KEYS[key]}")
            _detector_tables(path, value)
        elif key == "lint":
            if not isinstance(value, dict):
                raise UsageError(f"{path}: [tool.traindoc.lint] must be a table")
            check_table(path, value, "[tool.traindoc.lint]")


def _ids(path: Path, key: str, value: object) -> tuple[str, ...]:
    """A list of catalog ids (one id as a string is a list of one)."""
    from traindoc import catalog

    ids = [value] if isinstance(value, str) else value
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise UsageError(f"{path}: {key} must be a list of failure ids, got {value!r}")
    for id_ in ids:
        try:
            catalog.get(id_)
        except KeyError as exc:
            raise UsageError(f"{path}: {key}: {exc.args[0]}") from None
    return tuple(ids)


def _detector_tables(path: Path, tables: object) -> dict[str, dict[str, object]]:
    """``[tool.traindoc.detectors.ID]`` tables checked against each detector's Config: a known
    id, known fields, values of the default's type, and the Config's own checks."""
    import dataclasses

    from traindoc import detectors

    assert isinstance(tables, dict)  # check_table refused anything else
    by_id = detectors.by_id()
    out: dict[str, dict[str, object]] = {}
    for id_, values in tables.items():
        where = f"[tool.traindoc.detectors.{id_}]"
        if id_ not in by_id:
            hint = _did_you_mean(id_, by_id) or f"; the detectors are {', '.join(sorted(by_id))}"
            raise UsageError(f"{path}: {where}: no detector has the id {id_!r}{hint}")
        if not isinstance(values, dict):
            raise UsageError(f"{path}: {where} must be a table of thresholds (name = value)")
        fields = {f.name: f for f in dataclasses.fields(by_id[id_].Config)}
        checked: dict[str, object] = {}
        for key, value in values.items():
            if key not in fields:
                raise UsageError(f"{path}: {where} has an unknown key {key!r}{_did_you_mean(key, fields)}; "
                                 f"its keys are {', '.join(fields) or 'none'}")
            checked[key] = _typed(path, f"{where} {key}", value, _default(fields[key]))
        make_config: Callable[..., object] = by_id[id_].Config  # a concrete dataclass, typed as a protocol
        try:
            make_config(**checked)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{path}: {where} {exc}") from None
        out[id_] = checked
    return out


def _default(field_: object) -> object:
    import dataclasses

    assert isinstance(field_, dataclasses.Field)
    if field_.default_factory is not dataclasses.MISSING:
        return field_.default_factory()
    return field_.default


def _typed(path: Path, key: str, value: object, default: object) -> object:
    """``value`` when it has the type of the field's default (an int for a float; a list for a
    tuple, made one), else UsageError."""
    if isinstance(default, tuple) and isinstance(value, list):
        return tuple(value)
    if default is None or isinstance(value, bool) is isinstance(default, bool) and (
            isinstance(value, type(default)) or (isinstance(default, float) and isinstance(value, int))):
        return value
    what = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            tuple: "a list"}.get(type(default), type(default).__name__)
    raise UsageError(f"{path}: {key} must be {what}, got {value!r}")


def _did_you_mean(name: str, known: Mapping[str, object]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
