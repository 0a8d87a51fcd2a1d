"""The options every integration checks the same way, light enough for the pytest plugin,
which every pytest run of an environment with traindoc installed imports."""

from __future__ import annotations

from typing import Iterable

from traindoc import catalog
from traindoc.findings import SEVERITIES, Finding, severity_rank

LEVEL_NAMES = ("cheap", "standard", "thorough")


class TrainingFindings(Exception):
    """Raised when training ends with findings at or above the callback's ``fail_on``."""

    def __init__(self, findings: list[Finding], fail_on: str) -> None:
        self.findings = findings
        listed = ", ".join(f"{f.id} ({f.severity}, step {f.step})" for f in findings)
        super().__init__(f"traindoc: {len(findings)} finding(s) at or above {fail_on}: {listed}")


def check_options(level: str, fail_on: str | None, ids: Iterable[str]) -> None:
    """A wrong option fails when the callback is made, not after the training."""
    if level not in LEVEL_NAMES:
        raise ValueError(f"level must be one of {', '.join(LEVEL_NAMES)}, got {level!r}")
    if fail_on is not None and fail_on not in SEVERITIES:
        raise ValueError(f"fail_on must be one of {', '.join(SEVERITIES)} or None, got {fail_on!r}")
    for id_ in ids:
        try:
            catalog.get(id_)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None


def at_or_above(findings: Iterable[Finding], severity: str) -> list[Finding]:
    rank = severity_rank(severity)
    return [f for f in findings if severity_rank(f.severity) <= rank]
