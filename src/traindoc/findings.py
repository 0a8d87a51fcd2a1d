"""Findings are plain data: what was observed (with numbers), the likely cause and the fix.

Renderers (terminal, JSON, HTML, SARIF) read these; nothing here knows how they are shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Union

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
# JSON-friendly evidence values: numbers measured in the run, names, short lists of them. The
# homogeneous lists are listed apart because list is invariant: a list[str] is no
# list[int | float | str] to mypy.
EvidenceValue = Union[
    int, float, str, bool, None,
    list[int], list[float], list[str], list[Union[int, float, str]],
    dict[str, float],
]


@dataclass(frozen=True)
class Finding:
    """One diagnosed failure.

    ``message`` is the observation in one sentence with its numbers and the threshold crossed;
    ``evidence`` holds the same numbers as data; ``where`` names the user's objects (parameter
    or module names, ``file:line``). ``step`` is the first optimizer step (0-based) at which the
    failure was observed, None when unknown (a checkpoint, a source file).
    """

    id: str
    severity: Severity
    title: str
    message: str
    cause: str
    fix: str
    step: int | None = None
    evidence: dict[str, EvidenceValue] = field(default_factory=dict)
    where: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "step": self.step,
            "message": self.message,
            "evidence": dict(self.evidence),
            "cause": self.cause,
            "fix": self.fix,
            "where": list(self.where),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        """The inverse of ``to_dict`` (a dict that came from it, or that was checked as one)."""
        return cls(id=d["id"], severity=d["severity"], title=d["title"], message=d["message"],
                   cause=d["cause"], fix=d["fix"], step=d["step"], evidence=dict(d["evidence"]),
                   where=tuple(d["where"]))


def severity_rank(severity: str) -> int:
    """0 for error, 1 for warning, 2 for info: sort key and --fail-on comparison."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def fmt(x: float) -> str:
    """A number for a message: 3 significant digits, scientific when tiny or huge."""
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    ax = abs(x)
    if ax != 0 and (ax < 1e-3 or ax >= 1e5):
        return f"{x:.2e}"
    return f"{x:.3g}"
