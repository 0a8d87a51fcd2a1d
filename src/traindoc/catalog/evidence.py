"""Which faces of each failure id are built, computed from evidence the test suite checks.

A face counts as built for an id only when a test proves it on a case that must fire:

- live: a zoo case expects the id (tests/test_zoo.py runs it under ``traindoc run``), or a
  detector example replays a stream recorded live (tests/live*/...);
- logs: a detector example reads a log fixture (tests/fixtures/logs/...);
- ckpt: a detector example replays a checkpoint stream (tests/ckpt/...);
- lint: a lint rule reports the id (its valid and invalid examples run in tests/lint);
- ``TESTED_ELSEWHERE``: units outside the two registries, with the test file that proves them.

The result is committed beside the catalog pages as ``faces.json`` (``python tools/coverage.py
--write``), so ``catalog.faces`` needs neither the tests nor the zoo at run time; a test
recomputes it from the repository and fails when the file is stale.
"""

from __future__ import annotations

import json
from typing import Iterable

from traindoc import catalog
from traindoc.cases import Case

# The rollback guard is policy, not a detector, so it has no examples; its tests prove it.
TESTED_ELSEWHERE: dict[str, dict[str, str]] = {
    "guard-rollback": {"live": "tests/live_metrics/test_guard.py"},
    # A fleet's runs compared with each other: no detector sees more than one run.
    "sibling-outlier": {"logs": "tests/fleet/test_folders.py"},
    # The preflight probes: each fails on a case made for it and passes on healthy ones.
    **{id_: {"preflight": "tests/preflight/test_preflight.py"} for id_ in (
        "bad-initial-loss", "no-gradient", "nondeterministic-eval", "resume-mismatch", "cannot-overfit-batch",
        "lr-out-of-range", "nonfinite", "vanishing-gradients")},
}


def _example_face(source: str) -> str | None:
    """The face a detector example proves, from where its stream or log comes from."""
    top = source.split("/")[0]
    if top.startswith("live"):
        return "live"
    if source.startswith(("fixtures/logs", "logs/")):
        return "logs"
    if top == "ckpt":
        return "ckpt"
    return None  # a zoo example: the zoo case's own expectation line counts for live


def compute(cases: Iterable[Case]) -> dict[str, list[str]]:
    """{id: built faces} for every catalog id, from the zoo ``cases`` (the repository's
    ``zoo/`` plus the demo scripts), the detectors' examples and the lint rules."""
    from traindoc import detectors
    from traindoc.lint.rules import RULES

    have: dict[str, set[str]] = {id_: set() for id_ in catalog.entries()}

    def add(id_: str, face: str) -> None:
        catalog.get(id_)  # evidence for an id the catalog lacks is a bug: KeyError
        have[id_].add(face)

    for case in cases:
        for id_ in case.expect:
            add(id_, "live")
    for cls in detectors.DETECTORS:
        for ex in cls.examples:
            face = _example_face(ex.source) if ex.fires_at is not None else None
            if face:
                add(cls.id, face)
    for rule in RULES:
        add(rule.id, "lint")
    for id_, faces in TESTED_ELSEWHERE.items():
        for face in faces:
            add(id_, face)
    return {id_: [f for f in catalog.FACES if f in got] for id_, got in sorted(have.items())}


def dumps(built: dict[str, list[str]]) -> str:
    """``faces.json``: one id per line, so a change reads as a one-line diff."""
    rows = [f"  {json.dumps(id_)}: {json.dumps(faces)}" for id_, faces in built.items()]
    return "{\n" + ",\n".join(rows) + "\n}\n"


def table() -> str:
    """The README's coverage table, from the catalog and its committed ``faces.json``."""
    faces = catalog.FACES
    rows = ["| id | severity | " + " | ".join(faces) + " |", "|---|---|" + "---|" * len(faces)]
    working = 0
    for entry in catalog.entries().values():
        state = catalog.faces(entry.id)
        working += any(state.values())
        cells = ["✓" if state.get(f) else ("·" if f in state else "") for f in faces]
        rows.append(f"| `{entry.id}` | {entry.severity} | " + " | ".join(cells) + " |")
    rows.append(f"\n{working} of {len(catalog.entries())} failure ids have at least one working face. "
                "✓ built and tested; · planned, not built yet.")
    return "\n".join(rows)
