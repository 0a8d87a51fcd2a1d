"""lint reads source only: it must start and run without importing torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import traindoc.lint

LINT_DIR = Path(traindoc.lint.__file__).parent
CORPUS = Path(__file__).parents[1] / "lint_corpus"
DEMO = Path(__file__).parent / "demo_train.py"  # has findings: the finding machinery loads too


def test_lint_run_does_not_import_torch():
    code = (
        "import sys\n"
        "from traindoc.lint.__main__ import main\n"
        f"rc = main([{str(CORPUS)!r}, {str(DEMO)!r}, '--format', 'sarif', '-o', '/dev/null'])\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr  # 1: the demo's findings; torch never imported


def test_no_torch_import_in_lint_sources():
    for path in LINT_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "torch" for a in node.names), path
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                assert (node.module or "").split(".")[0] != "torch", path
