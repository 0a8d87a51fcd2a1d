"""Regenerate the catalog's built faces (src/traindoc/catalog/faces.json) and the README's
coverage table from the evidence the tests check (see ``traindoc.registry``).

    python tools/coverage.py            # print the table from the committed faces.json
    python tools/coverage.py --write    # rewrite faces.json, then the table in README.md
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import zoo_cases as zoo  # noqa: E402
from traindoc import catalog  # noqa: E402
from traindoc import registry  # noqa: E402

FACES_JSON = ROOT / "src" / "traindoc" / "catalog" / "faces.json"
START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"


def main() -> None:
    if "--write" not in sys.argv:
        print(registry.coverage_table())
        return
    FACES_JSON.write_text(registry.dumps(registry.compute(zoo.cases())), encoding="utf-8")
    catalog.built.cache_clear()  # the table must read the file just written
    readme = ROOT / "README.md"
    body = readme.read_text(encoding="utf-8")
    head, rest = body.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{registry.coverage_table()}\n{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    main()
