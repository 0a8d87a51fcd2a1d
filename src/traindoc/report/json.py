"""The JSON report: a stable contract (see docs/report-schema.md and schema.json beside this file).

``{"traindoc": version, "schema_version": 2, "run": {...}, "findings": [...], "not_applicable":
[...], "ran": [...], "disabled": [...], "series": {...}, "params": {...}}``. ``from_dict`` reads
one back, so ``traindoc report run.json`` re-renders any saved report.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import Any

from traindoc.curves import Curve
from traindoc.engine import Report
from traindoc.findings import SEVERITIES, Finding
from traindoc.report import safe
from traindoc.version import __version__

SCHEMA_VERSION = 2
# A report names at most this many parameters in "params": those a finding names first.
MAX_PARAMS = 200
# A saved report read back is at most this deep (one written is 6 or 7 levels deep).
MAX_DEPTH = 32


def clean(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as the strings "nan", "inf", "-inf". Strings and keys
    lose their lone surrogates (a file name that was not UTF-8), so the file is valid UTF-8."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return safe.json_text(value)
    if isinstance(value, dict):
        return {safe.json_text(k) if isinstance(k, str) else k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def to_dict(report: Report) -> dict[str, Any]:
    run: dict[str, object] = {"script": "", "argv": [], "python": "", "torch": "", "started": None,
                              "duration_s": None, "steps": 0, "ranks": 1}
    run.update(report.run)
    return clean({
        "traindoc": __version__,
        "schema": SCHEMA_VERSION,  # the name schema 1 used; kept so old readers go on working
        "schema_version": SCHEMA_VERSION,
        "run": run,
        "findings": [f.to_dict() for f in report.findings],
        "not_applicable": [{"id": i, "reason": r} for i, r in report.not_applicable],
        "ran": list(report.ran),
        "disabled": [{"id": i, "error": e} for i, e in report.disabled],
        "series": {name: {"steps": c.steps, "values": c.values, "nonfinite": [list(p) for p in c.nonfinite],
                          "points": c.points, "width": c.width}
                   for name, c in report.series.items()},
        "params": _params(report),
    })


def _params(report: Report) -> dict[str, Any]:
    """The parameters the findings name, then the others, up to MAX_PARAMS."""
    named = [n for f in report.findings for n in f.where if n in report.params]
    order = list(dict.fromkeys(named + list(report.params)))[:MAX_PARAMS]
    return {name: report.params[name] for name in order}


def dumps(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2, sort_keys=False) + "\n"


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the report, shipped in the package."""
    text = resources.files("traindoc.report").joinpath("schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def from_dict(data: dict[str, Any]) -> Report:
    """A saved report back as a Report (schema 1 or 2; schema 1 has no series). Raises
    ValueError naming the first field that is missing or of the wrong type (``findings[0].step
    must be an integer or null, got 'x'``): the renderers then meet only the types they write."""
    if not isinstance(data, dict) or "findings" not in data or "run" not in data:
        raise ValueError("not a traindoc JSON report (no 'run' and 'findings')")
    if _deeper_than(data, MAX_DEPTH):  # the renderers and clean() recurse into evidence
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep; a traindoc report is a few levels deep")
    version = data.get("schema_version", data.get("schema"))
    if not isinstance(version, int) or isinstance(version, bool) or version > SCHEMA_VERSION:
        raise ValueError(f"report schema {_shown(version)}: this traindoc reads schema 1 to {SCHEMA_VERSION}")
    run = _check(data["run"], dict, "run", "an object")
    for key, kinds, what in _RUN_FIELDS:
        if key in run:
            _check(run[key], kinds, f"run.{key}", what)
    _strings(run.get("argv", []), "run.argv")
    findings = []
    for i, f in enumerate(_check(data["findings"], list, "findings", "a list")):
        at = f"findings[{i}]"
        f = _check(f, dict, at, "an object")
        for key in ("id", "severity", "title", "message", "cause", "fix"):
            _check(f.get(key), str, f"{at}.{key}", "a string")
        if f["severity"] not in SEVERITIES:
            raise ValueError(f"{at}.severity must be one of {', '.join(SEVERITIES)}, got {_shown(f['severity'])}")
        step = _check(f.get("step"), (int, type(None)), f"{at}.step", "an integer or null")
        evidence = _check(_or(f.get("evidence"), {}), dict, f"{at}.evidence", "an object")
        where = _strings(_or(f.get("where"), []), f"{at}.where")
        findings.append(Finding.from_dict({**f, "step": step, "evidence": evidence, "where": where}))
    series = {}
    for name, c in _check(_or(data.get("series"), {}), dict, "series", "an object").items():
        at = f"series[{_shown(name)}]"
        c = _check(c, dict, at, "an object")
        steps = _ints(_check(c.get("steps"), list, f"{at}.steps", "a list"), f"{at}.steps")
        values = [_number(v, f"{at}.values") for v in _check(c.get("values"), list, f"{at}.values", "a list")]
        nonfinite = []
        for pair in _check(c.get("nonfinite", []), list, f"{at}.nonfinite", "a list"):
            if not (isinstance(pair, list) and len(pair) == 2 and pair[1] in ("nan", "inf", "-inf")):
                raise ValueError(f"{at}.nonfinite must hold [step, \"nan\" | \"inf\" | \"-inf\"] pairs, "
                                 f"got {_shown(pair)}")
            nonfinite.append((_ints([pair[0]], f"{at}.nonfinite")[0], str(pair[1])))
        points = _check(c.get("points", len(steps)), int, f"{at}.points", "an integer")
        width = _check(c.get("width", 1), int, f"{at}.width", "an integer")
        if len(values) != len(steps) or width < 1:
            raise ValueError(f"{at}: steps and values must be as long as each other and width >= 1")
        series[name] = Curve(steps=steps, values=values, nonfinite=nonfinite, points=points, width=width)
    params = _check(_or(data.get("params"), {}), dict, "params", "an object")
    for name, row in params.items():
        _check(row, dict, f"params[{_shown(name)}]", "an object")
    return Report(
        run=dict(run), findings=findings, ran=_strings(data.get("ran", []), "ran"),
        not_applicable=_pairs(data.get("not_applicable", []), "not_applicable", "reason"),
        disabled=_pairs(data.get("disabled", []), "disabled", "error"),
        series=series, params=dict(params),
    )


# The run fields the renderers read, with the types the writers give them ("nan"/"inf" where a
# number was not finite).
_NUMBER = (int, float, str, type(None))
_RUN_FIELDS: tuple[tuple[str, type | tuple[type, ...], str], ...] = (
    *((k, str, "a string") for k in ("script", "python", "torch", "source", "level", "status", "x")),
    *((k, int, "an integer") for k in ("steps", "ranks")),
    ("exit_code", (int, type(None)), "an integer or null"),
    ("optimizer_steps", (int, type(None)), "an integer or null"),
    ("started", _NUMBER, "a number or null"),
    ("duration_s", _NUMBER, "a number or null"),
    ("trained", bool, "true or false"),
    ("argv", list, "a list of strings"),
)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` deep (without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _or(value: Any, default: Any) -> Any:
    """``default`` for a missing (null) field; an empty list where an object belongs is wrong."""
    return default if value is None else value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check(value: Any, kinds: type | tuple[type, ...], where: str, what: str) -> Any:
    """``value`` when it is of ``kinds`` (a bool is no integer here), else ValueError."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
        return value
    raise ValueError(f"{where} must be {what}, got {_shown(value)}")


def _strings(value: Any, where: str) -> list[str]:
    items = _check(value, list, where, "a list of strings")
    for item in items:
        _check(item, str, where, "a list of strings")
    return list(items)


def _ints(value: list[Any], where: str) -> list[int]:
    for item in value:
        _check(item, int, where, "a list of integers")
    return list(value)


def _pairs(value: Any, where: str, second: str) -> list[tuple[str, str]]:
    """``[{"id": ..., second: ...}, ...]`` as (id, text) pairs."""
    out = []
    for i, item in enumerate(_check(value, list, where, "a list")):
        item = _check(item, dict, f"{where}[{i}]", "an object")
        out.append((_check(item.get("id"), str, f"{where}[{i}].id", "a string"),
                    _check(item.get(second), str, f"{where}[{i}].{second}", "a string")))
    return out


def _number(value: Any, where: str) -> float:
    """A number, or one of the strings clean writes for a non-finite one."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return float(_check(value, (int, float), where, "a list of numbers"))
