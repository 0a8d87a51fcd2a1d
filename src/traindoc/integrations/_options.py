"""The options every integration takes, in one frozen dataclass checked when it is made (a wrong
option fails then, not after the training); light enough for the pytest plugin, which every
pytest run of an environment with traindoc installed imports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence, TypedDict

from traindoc import catalog
from traindoc.findings import SEVERITIES, Finding, severity_rank

LEVEL_NAMES = ("cheap", "standard", "thorough")


@dataclass(frozen=True)
class Options:
    """``json``/``html``: report files; ``fail_on``: raise ``TrainingFindings`` at the end of
    a training with findings at or above this severity ("error", "warning", "info"); ``level``:
    "cheap" | "standard" | "thorough"; ``select``/``ignore``: failure ids; ``export``: True
    sends each finding when it first fires to the framework's trackers, or a list of
    names/tracker objects."""

    json: str | None = None
    html: str | None = None
    fail_on: str | None = None
    level: str = "standard"
    select: Sequence[str] | None = None
    ignore: Sequence[str] = ()
    export: bool | Sequence[object] = False

    def __post_init__(self) -> None:
        # Stored as tuples: a list the caller changes later changes nothing here.
        if self.select is not None:
            object.__setattr__(self, "select", tuple(self.select))
        object.__setattr__(self, "ignore", tuple(self.ignore))
        if not isinstance(self.export, bool):
            object.__setattr__(self, "export", tuple(self.export))
        check_options(self.level, self.fail_on, [*(self.select or ()), *self.ignore])


class OptionArgs(TypedDict, total=False):
    """``Options``' fields as keywords, for the callbacks' ``**options`` (a test keeps the two
    the same)."""

    json: str | None
    html: str | None
    fail_on: str | None
    level: str
    select: Sequence[str] | None
    ignore: Sequence[str]
    export: bool | Sequence[object]


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
