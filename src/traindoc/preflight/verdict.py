"""A probe's verdict: pass, fail or not applicable, with what was measured. Plain data."""

from __future__ import annotations

from dataclasses import dataclass

from traindoc.findings import Finding

PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "n/a"

# The probes in the order they run and are printed; `--only` takes these names.
PROBES: tuple[str, ...] = ("initial-loss", "gradients", "overfit", "eval", "resume", "lr")


@dataclass(frozen=True)
class Verdict:
    probe: str
    status: str  # PASS, FAIL or NOT_APPLICABLE
    summary: str  # what was measured, or why the probe could not run
    findings: tuple[Finding, ...] = ()
    seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {"probe": self.probe, "status": self.status, "summary": self.summary,
                "findings": [f.id for f in self.findings], "seconds": round(self.seconds, 3)}


