"""traindoc on Python 3.10, the oldest it supports (requires-python >= 3.10), while development
and CI run 3.11: the torch-free faces (``--help``, ``explain``, ``lint``, ``logs``) run under
``python3.10`` with only the declared dependencies, and no module of the package uses a
standard-library name that 3.10 lacks.

The class of bug: ``tomllib`` (3.11) imported with a ``tomli`` fallback that was never declared
as a dependency, so ``logs`` failed on every 3.10 install. Here the 3.10 interpreter runs with
``-S`` (no site-packages of its own) and a folder holding exactly the dependencies
``pyproject.toml`` declares for 3.10 (torch left out: these faces never import it), so a missing
declaration fails as it would for a user. Skipped only where no python3.10 executable exists
(pyenv's is used when it is not on PATH).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENV, ROOT


def python310() -> str | None:
    found = shutil.which("python3.10")
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [found] if found else []
    candidates += sorted(glob.glob(os.path.join(pyenv, "versions", "3.10*", "bin", "python3.10")))
    for exe in candidates:
        ran = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=60)
        if ran.returncode == 0 and ran.stdout.strip() == "(3, 10)":
            return exe
    return None


PY310 = python310()
pytestmark = pytest.mark.skipif(PY310 is None, reason="no python3.10 executable on this machine")


def declared_for_310() -> list[str]:
    """pyproject's runtime dependencies whose marker holds on 3.10, torch left out."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = []
    for dep in deps:
        spec, _, marker = dep.partition(";")
        name = re.split(r"[<>=!~ \[]", spec.strip(), maxsplit=1)[0]
        if name == "torch":
            continue
        if marker.strip():
            ran = subprocess.run([str(PY310), "-S", "-c", f"import sys, platform; print({_python_marker(marker)})"],
                                 capture_output=True, text=True, timeout=60)
            assert ran.returncode == 0, ran.stderr
            if ran.stdout.strip() != "True":
                continue
        out.append(spec.strip())
    return out


def _python_marker(marker: str) -> str:
    """A PEP 508 marker on python_version as a Python expression (the only kind pyproject uses)."""
    expr = marker.strip()
    assert re.fullmatch(r"python_version\s*[<>=!]+\s*'[\d.]+'", expr), f"unhandled marker {expr!r}"
    op, version = re.findall(r"([<>=!]+)\s*'([\d.]+)'", expr)[0]
    return f"sys.version_info[:2] {op} {tuple(int(p) for p in version.split('.'))}"


@pytest.fixture(scope="module")
def site310(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site310")
    ran = subprocess.run([str(PY310), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          "--no-warn-script-location", "--target", str(target), *declared_for_310()],
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return target


def run310(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(site)])}
    return subprocess.run([str(PY310), "-S", *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)


@pytest.mark.parametrize("args", [
    ("--help",),
    ("explain", "clipping-every-step"),
    ("lint", "zoo/healthy_mlp.py", "zoo/missing_zero_grad.py"),
    ("logs", "tests/fixtures/logs/csv/clipped_every_step.csv", "--max-norm", "1"),
], ids=["help", "explain", "lint", "logs"])
def test_torch_free_faces_run_on_python_310(args: tuple[str, ...], site310: Path) -> None:
    ran = run310(site310, "-m", "traindoc", *args)
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]
    on_311 = subprocess.run([sys.executable, "-m", "traindoc", *args], capture_output=True, text=True,
                            cwd=ROOT, env=ENV, timeout=300)
    assert ran.returncode == on_311.returncode, ran.stderr[-3000:]  # lint: 1 on an error it found
    assert ran.stdout.splitlines()[-3:] == on_311.stdout.splitlines()[-3:]
    assert "torch" not in run310(site310, "-c", "import sys, traindoc.cli; print(sorted(sys.modules))").stdout


# Run by python3.10 itself: every `from M import N` and `M.N` of a standard-library module in
# the package must exist on 3.10, unless guarded (inside try/except or an `if`, e.g. TYPE_CHECKING
# or a version check).
SCAN = r"""
import ast, importlib, pathlib, sys

def submodule(module, name):
    try:
        importlib.import_module(f"{module}.{name}")
        return True
    except ImportError:
        return False


missing = []
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Try, ast.If)):
            guarded.update(id(n) for n in ast.walk(node))
    aliases = {}
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in sys.stdlib_module_names:
                    aliases[a.asname or a.name] = a.name
                    try:
                        importlib.import_module(a.name)
                    except ImportError:
                        missing.append(f"{path}:{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in sys.stdlib_module_names:
            try:
                mod = importlib.import_module(node.module)
            except ImportError:
                missing.append(f"{path}:{node.lineno}: from {node.module}")
                continue
            for a in node.names:
                if a.name != "*" and not hasattr(mod, a.name) and not submodule(node.module, a.name):
                    missing.append(f"{path}:{node.lineno}: from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if id(node) in guarded or not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Name):
            continue
        if isinstance(node.ctx, ast.Store):  # setting a name 3.10 lacks (sys.last_value) works
            continue
        module = aliases.get(node.value.id)
        if module is not None:
            mod = importlib.import_module(module)
            if not hasattr(mod, node.attr) and not hasattr(mod, "__path__"):
                missing.append(f"{path}:{node.lineno}: {module}.{node.attr}")
print("\n".join(missing))
"""


def test_no_standard_library_name_that_python_310_lacks() -> None:
    ran = subprocess.run([str(PY310), "-S", "-c", SCAN, str(ROOT / "src" / "traindoc")], capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip() == "", f"names 3.10 does not have:\n{ran.stdout}"


def test_every_module_compiles_on_python_310(tmp_path: Path) -> None:
    """Syntax newer than 3.10 (``except*``, PEP 695 generics, f-strings reusing their quotes)."""
    ran = subprocess.run([str(PY310), "-S", "-m", "compileall", "-q", "-f", "-x", r"__pycache__",
                          str(ROOT / "src" / "traindoc")], capture_output=True, text=True, timeout=300,
                         env={**ENV, "PYTHONPYCACHEPREFIX": str(tmp_path)})
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
