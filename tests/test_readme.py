"""The README tells the truth: its coverage table is what the registry and the tests prove."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import coverage  # noqa: E402
from traindoc import registry  # noqa: E402


def test_readme_coverage_table_is_current() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(coverage.START, 1)[1].split(coverage.END, 1)[0].strip()
    assert block == registry.coverage_table().strip(), "run `python tools/coverage.py --write`"


def test_readme_commands_are_the_ci_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "OMP_NUM_THREADS=1 python -m pytest -q -n 2" in readme
    assert "OMP_NUM_THREADS=1 python -m pytest -q -n 2" in ci
    assert 'pip install -q -c constraints.txt -e ".[dev]"' in ci
