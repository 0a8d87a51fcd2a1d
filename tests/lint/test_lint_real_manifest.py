"""The manifest of benchmarks/lint_real.py: real training files read where they live (repository,
commit, path) with the mistakes marked by hand. Its format is checked here on every run; the
benchmark itself runs when the checkouts are on this machine ($TRAINDOC_LINT_REAL, default
/tmp/lintbench), which CI (no internet) does not have."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

from traindoc.lint.engine import lint_ids

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "lint_real.py"
MANIFEST = ROOT / "benchmarks" / "lint_real_manifest.toml"


def _bench():
    spec = importlib.util.spec_from_file_location("lint_real", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["lint_real"] = module
    spec.loader.exec_module(module)
    return module


def test_manifest_entries_are_well_formed():
    data = tomllib.loads(MANIFEST.read_text(encoding="utf-8"))
    files = data["file"]
    ids = set(lint_ids())
    for item in files:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", item["repo"]), item
        assert re.fullmatch(r"[0-9a-f]{40}", item["commit"]), item
        assert item["path"].endswith(".py") and not item["path"].startswith("/"), item
        for mistake in item["mistakes"]:
            assert mistake["rule"] in ids, mistake
            assert isinstance(mistake["line"], int) and mistake["line"] > 0, mistake
            assert mistake["reason"].strip(), mistake
    # what the issue asks of it: >= 60 files from >= 6 repositories
    assert len(files) >= 60
    assert len({item["repo"] for item in files}) >= 6
    # a file at most once per commit (a second commit of a repository: a mistake a later commit fixed)
    keys = [(item["repo"], item["commit"], item["path"]) for item in files]
    assert len(keys) == len(set(keys))


def test_the_benchmark_loader_accepts_it_and_rejects_bad_entries(tmp_path):
    bench = _bench()
    entries = bench.load_manifest(MANIFEST, set(lint_ids()))
    assert len(entries) >= 60 and sum(len(e.marks) for e in entries) >= 1
    older = [e for e in entries if e.older]  # a second commit of a repository: its own checkout
    assert older and all(e.folder.endswith("@" + e.commit[:12]) for e in older)
    good = '[[file]]\nrepo = "a/b"\ncommit = "%s"\npath = "train.py"\nmistakes = [%s]\n'
    bad = {
        "short commit": good % ("abc123", ""),
        "unknown rule": good % ("0" * 40, '{ rule = "no-such-rule", line = 3, reason = "x" }'),
        "no reason": good % ("0" * 40, '{ rule = "missing-zero-grad", line = 3, reason = "" }'),
        "line zero": good % ("0" * 40, '{ rule = "missing-zero-grad", line = 0, reason = "x" }'),
    }
    for why, text in bad.items():
        path = tmp_path / "m.toml"
        path.write_text(text)
        with pytest.raises(ValueError):
            bench.load_manifest(path, set(lint_ids()))
        assert bench.main(["--manifest", str(path), "--checkouts", str(tmp_path)]) == 2, why


def test_benchmark_on_the_checkouts_has_no_false_positive(capsys):
    bench = _bench()
    entries = bench.load_manifest(MANIFEST, set(lint_ids()))
    root = bench.DEFAULT_CHECKOUTS
    if not all((root / e.folder / e.path).is_file() for e in entries):
        pytest.skip(f"checkouts not under {root} (make them with benchmarks/lint_real.py --export)")
    assert bench.main(["--checkouts", str(root)]) == 0, capsys.readouterr().out


def test_readme_table_matches_the_manifest():
    """The README's lint_real row counts what the manifest holds (found, FP, recall come from a
    run of the benchmark and are checked there)."""
    data = tomllib.loads(MANIFEST.read_text(encoding="utf-8"))["file"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = re.search(r"\| files \| repositories \| marked mistakes \|.*\n\|[-| ]+\|\n\| (\d+) \| (\d+) \| (\d+) \|", readme)
    assert row, "the lint_real table is missing from README.md"
    files, repos, marked = (int(g) for g in row.groups())
    assert files == len(data)
    assert repos == len({item["repo"] for item in data})
    assert marked == sum(len(item["mistakes"]) for item in data)
