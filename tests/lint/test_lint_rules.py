"""Every lint rule's examples are its tests: invalid snippets fire at their lines, valid
near-misses stay quiet. The registry tuple and the modules on disk agree."""

from __future__ import annotations

import pkgutil

import pytest

import traindoc.lint.rules as rules_pkg
from traindoc import catalog
from traindoc.lint import lint_source
from traindoc.lint.rules import RULES, by_id, rule_docs
from traindoc.lint.rules._common import snippet

INVALID = [
    pytest.param(cls, i, example, id=f"{cls.id}-invalid-{i}")
    for cls in RULES
    for i, example in enumerate(cls.invalid)
]
VALID = [
    pytest.param(cls, i, code, id=f"{cls.id}-valid-{i}") for cls in RULES for i, code in enumerate(cls.valid)
]


def test_registry_matches_modules_on_disk():
    on_disk = {m.name for m in pkgutil.iter_modules(rules_pkg.__path__) if not m.name.startswith("_")}
    registered = {cls.__module__.rsplit(".", 1)[-1] for cls in RULES}
    assert on_disk == registered
    assert len(RULES) == len(set(RULES))


@pytest.mark.parametrize("cls", RULES, ids=lambda c: c.id)
def test_rule_shape(cls):
    assert catalog.get(cls.id).id == cls.id  # a catalog id, so severity and title exist
    assert cls.invalid, f"{cls.id} has no invalid examples"
    assert cls.valid, f"{cls.id} has no valid near-misses"
    assert cls.__doc__ and len(cls.__doc__.split()) > 20, f"{cls.id} needs a docstring (it is its docs)"
    assert callable(getattr(cls, "check", None))


def test_one_rule_per_id():
    assert len(by_id()) == len(RULES)


@pytest.mark.parametrize("cls, index, example", INVALID)
def test_invalid_example_fires_at_its_line(cls, index, example):
    findings, errors = lint_source(snippet(example.code), "example.py", select=[cls.id])
    assert not errors
    assert sorted({f.line for f in findings}) == sorted(example.lines)
    for f in findings:
        assert f.finding.id == cls.id
        assert f.finding.message and f.finding.cause and f.finding.fix
        assert f.finding.severity == catalog.get(cls.id).severity
        assert "`" in f.finding.message  # names the user's own objects


@pytest.mark.parametrize("cls, index, code", VALID)
def test_valid_example_is_quiet_for_every_rule(cls, index, code):
    findings, errors = lint_source(snippet(code), "example.py")
    assert not errors
    assert [(f.finding.id, f.line) for f in findings] == []


@pytest.mark.parametrize("cls", RULES, ids=lambda c: c.id)
def test_rule_docs_show_examples(cls):
    docs = rule_docs(cls.id)
    assert docs is not None
    assert f"## Lint rule `{cls.id}`" in docs
    assert docs.count("```python") == len(cls.invalid) + len(cls.valid)
    assert "Fires at line" in docs and "Stays quiet on" in docs


def test_rule_docs_unknown_id():
    assert rule_docs("loss-spike") is None
