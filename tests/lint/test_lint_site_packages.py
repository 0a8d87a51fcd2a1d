"""Precision on training code written without traindoc in mind: the training loops that the
installed ``torch``, ``transformers``, ``lightning``, ``accelerate`` and ``deepspeed`` wheels ship
(accelerate's test_utils scripts, lightning's demos, torch's distributed test helpers ...),
found at test time in site-packages and linted in place. Nothing is copied into the project.

Every finding there must be one verified by hand to be real (``VERIFIED``, with the reason);
anything else is a false positive to fix. The files are also broken on purpose, in memory, to
check that lint still sees their training flow (a precision test that cannot fail is no test).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from traindoc.lint import lint_paths, lint_source
from traindoc.lint._ast import Module

PACKAGES = ("torch", "transformers", "lightning", "pytorch_lightning", "lightning_fabric", "accelerate", "deepspeed")
# (package-relative path, line, rule id) -> why the finding is real. Empty: lint reports nothing
# on the installed versions this was last checked against (torch 2.13, accelerate, lightning).
VERIFIED: dict[tuple[str, int, str], str] = {}

# Files (of those broken below) where missing-zero-grad must fire: the count on the versions
# installed here; a lower count is a lost spelling.
MIN_FIRED = 10

_BACKWARD = re.compile(r"\.backward\(")
_UPDATE = re.compile(r"\.step\(|zero_grad\(")


def _training_files() -> list[tuple[str, Path]]:
    """Files of the installed packages that hold a backward pass and an update."""
    out = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            if _BACKWARD.search(text) and _UPDATE.search(text):
                out.append((f"{name}/{path.relative_to(root)}", path))
    return out


FILES = _training_files()
needs_files = pytest.mark.skipif(len(FILES) < 20, reason="too few training scripts installed in site-packages")


@needs_files
def test_training_code_in_site_packages_is_clean():
    result = lint_paths([p for _, p in FILES], use_config=False)
    assert not result.errors
    names = {str(p): rel for rel, p in FILES}
    found = {(names.get(str(f.path), str(f.path)), f.line, f.finding.id) for f in result.findings}
    assert found - set(VERIFIED) == set(), "false positives (or real bugs to verify and list)"


@needs_files
def test_lint_sees_their_training_flow():
    """The scan is not vacuous: lint finds the backward passes and optimizer steps there."""
    backwards = steps = 0
    for _, path in FILES:
        mod = Module(path.read_text(encoding="utf-8", errors="replace"), str(path))
        backwards += sum(len(s.backwards) for s in mod.scopes)
        steps += sum(len(mod.optimizer_steps(s)) for s in mod.scopes)
    assert backwards >= 50 and steps >= 20


def _without_zero_grad(text: str) -> str | None:
    """``text`` with every ``x.zero_grad(...)`` statement of its code (not of its docstrings)
    replaced by ``pass``; None when it has none."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    hits = [
        n for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Attribute) and n.value.func.attr == "zero_grad"
        and n.lineno == n.end_lineno
    ]
    for n in hits:
        line = lines[n.lineno - 1]
        lines[n.lineno - 1] = line[: n.col_offset] + "pass" + line[n.end_col_offset:]
    return "".join(lines) if hits else None


@needs_files
def test_breaking_their_loops_fires():
    """With every ``zero_grad()`` removed, missing-zero-grad fires in files whose loops
    backward and step: lint follows their spellings (``accelerator.backward``, a Trainer
    class, ``optimizer_cls(...)``), not only ours."""
    broken, fired = [], []
    for rel, path in FILES:
        text = path.read_text(encoding="utf-8", errors="replace")
        changed = _without_zero_grad(text)
        if changed is None:
            continue
        findings, errors = lint_source(changed, str(path))
        broken.append(rel)
        if any(f.finding.id == "missing-zero-grad" for f in findings):
            fired.append(rel)
    assert len(broken) >= 10
    assert len(fired) >= MIN_FIRED, f"missing-zero-grad fired in {fired} of {broken}"
