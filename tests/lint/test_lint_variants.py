"""Metamorphic tests: every example of every lint rule, respelled (``lint_variants``), must be
judged as the example is. An invalid example's variants fire at the line of the mistake in the
variant and nowhere else; a valid example's variants stay quiet for every rule.

Variants lint does not yet judge right are listed in ``KNOWN_MISSES`` with the reason, as
strict expected failures: one that starts passing must be taken off the list.
"""

from __future__ import annotations

import pytest

from lint_variants import variants
from traindoc.lint import lint_source
from traindoc.lint.rules import RULES
from traindoc.lint.rules._common import snippet

# "<rule>-<invalid|valid>-<n>-<kind>" -> why lint does not yet judge that variant right. Empty:
# every variant passes (31 entries when this test was written; see docs/lint.md).
KNOWN_MISSES: dict[str, str] = {}


def _examples():
    for cls in RULES:
        for i, example in enumerate(cls.invalid):
            yield cls, f"invalid-{i}", snippet(example.code), example.lines
        for i, code in enumerate(cls.valid):
            yield cls, f"valid-{i}", snippet(code), ()


def _cases():
    for cls, name, code, lines in _examples():
        for v in variants(code, lines):
            key = f"{cls.id}-{name}-{v.kind}"
            marks = [pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[key])] if key in KNOWN_MISSES else []
            yield pytest.param(cls.id, v.code, v.lines, id=key, marks=marks)


CASES = list(_cases())


@pytest.mark.parametrize("rule, code, lines", CASES)
def test_variant(rule, code, lines):
    findings, errors = lint_source(code, "variant.py")
    assert not errors
    assert [(f.finding.id, f.line) for f in findings if f.finding.id != rule] == []
    assert sorted({f.line for f in findings}) == sorted(lines), code


def test_every_example_has_at_least_8_variants():
    counts = {f"{cls.id}-{name}": len(variants(code, lines)) for cls, name, code, lines in _examples()}
    assert {k: n for k, n in counts.items() if n < 8} == {}


def test_known_misses_are_variants():
    ids = {c.id for c in CASES}
    assert set(KNOWN_MISSES) <= ids, set(KNOWN_MISSES) - ids
