"""The README's catalog coverage table, computed from what is registered and tested.

A face counts as working for an id only with evidence that the test suite checks:
- live: a zoo case expects the id (tests/test_zoo.py runs it under `traindoc run`), or a
  detector example replays a live-recorded stream under tests/live*/;
- logs: a detector example reads a log fixture (tests/fixtures/logs/...);
- ckpt: a detector example replays a checkpoint stream (tests/ckpt/...);
- lint: a lint rule for the id (its examples run in tests/lint).
"✓" works and is tested; "·" the catalog lists the face but it is not built yet.

    python tools/coverage.py            # print the table
    python tools/coverage.py --write    # rewrite it in README.md between the markers
"""

from __future__ import annotations

import sys
from pathlib import Path

from traindoc import catalog, detectors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import zoo_cases as zoo  # noqa: E402
from traindoc.lint.rules import RULES

FACES = ("live", "logs", "ckpt", "lint", "preflight")
START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"


def working() -> dict[str, set[str]]:
    faces: dict[str, set[str]] = {}
    for case in zoo.cases():
        for id_ in case.expect:
            faces.setdefault(id_, set()).add("live")
    for cls in detectors.DETECTORS:
        for ex in cls.examples:
            if ex.fires_at is None:
                continue
            top = ex.source.split("/")[0]
            face = ("live" if top.startswith("live") else "logs" if ex.source.startswith(("fixtures/logs", "logs/"))
                    else "ckpt" if top == "ckpt" else None)
            if face:
                faces.setdefault(cls.id, set()).add(face)
    for rule in RULES:
        faces.setdefault(rule.id, set()).add("lint")
    return faces


def table() -> str:
    works = working()
    rows = ["| id | severity | " + " | ".join(FACES) + " |", "|---|---|" + "---|" * len(FACES)]
    for entry in catalog.entries().values():
        have = works.get(entry.id, set())
        cells = ["✓" if f in have else ("·" if f in entry.sources else "") for f in FACES]
        rows.append(f"| `{entry.id}` | {entry.severity} | " + " | ".join(cells) + " |")
    done = sum(1 for e in catalog.entries() if works.get(e))
    rows.append(f"\n{done} of {len(catalog.entries())} failure ids have at least one working face.")
    return "\n".join(rows)


def main() -> None:
    text = table()
    if "--write" in sys.argv:
        readme = Path(__file__).resolve().parents[1] / "README.md"
        body = readme.read_text(encoding="utf-8")
        head, rest = body.split(START, 1)
        _, tail = rest.split(END, 1)
        readme.write_text(f"{head}{START}\n{text}\n{END}{tail}", encoding="utf-8")
    else:
        print(text)


if __name__ == "__main__":
    main()
