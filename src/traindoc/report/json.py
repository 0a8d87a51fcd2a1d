"""The JSON report: a stable contract (see docs/report-schema.md).

``{"traindoc": version, "run": {...}, "findings": [...], "not_applicable": [...],
"ran": [...], "disabled": [...]}``
"""

from __future__ import annotations

import json
import math
from typing import Any

from traindoc.version import __version__
from traindoc.engine import Report

SCHEMA_VERSION = 1


def _clean(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as the strings "nan", "inf", "-inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def to_dict(report: Report) -> dict[str, Any]:
    run: dict[str, object] = {"script": "", "argv": [], "python": "", "torch": "", "started": None,
           "duration_s": None, "steps": 0, "ranks": 1}
    run.update(report.run)
    return _clean({
        "traindoc": __version__,
        "schema": SCHEMA_VERSION,
        "run": run,
        "findings": [f.to_dict() for f in report.findings],
        "not_applicable": [{"id": i, "reason": r} for i, r in report.not_applicable],
        "ran": list(report.ran),
        "disabled": [{"id": i, "error": e} for i, e in report.disabled],
    })


def dumps(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2, sort_keys=False) + "\n"
