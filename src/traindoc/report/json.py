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
from traindoc.findings import Finding
from traindoc.version import __version__

SCHEMA_VERSION = 2
# A report names at most this many parameters in "params": those a finding names first.
MAX_PARAMS = 200


def clean(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as the strings "nan", "inf", "-inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
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
    ValueError on a document that is not a traindoc report."""
    if not isinstance(data, dict) or "findings" not in data or "run" not in data:
        raise ValueError("not a traindoc JSON report (no 'run' and 'findings')")
    version = data.get("schema_version", data.get("schema"))
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(f"report schema {version!r}: this traindoc reads schema 1 to {SCHEMA_VERSION}")
    try:
        findings = [Finding(id=f["id"], severity=f["severity"], title=f["title"], message=f["message"],
                            cause=f["cause"], fix=f["fix"], step=f.get("step"),
                            evidence=dict(f.get("evidence") or {}), where=tuple(f.get("where") or ()))
                    for f in data["findings"]]
        series = {name: Curve(steps=[int(s) for s in c["steps"]], values=[_number(v) for v in c["values"]],
                              nonfinite=[(int(s), str(w)) for s, w in c.get("nonfinite", [])],
                              points=int(c.get("points", len(c["steps"]))), width=int(c.get("width", 1)))
                  for name, c in (data.get("series") or {}).items()}
        return Report(
            run=dict(data["run"]), findings=findings, ran=list(data.get("ran", [])),
            not_applicable=[(n["id"], n["reason"]) for n in data.get("not_applicable", [])],
            disabled=[(d["id"], d["error"]) for d in data.get("disabled", [])],
            series=series, params=dict(data.get("params") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed traindoc report: {type(exc).__name__}: {exc}") from None


def _number(value: Any) -> float:
    return float(value)  # float("nan") / float("inf") read the strings clean wrote
