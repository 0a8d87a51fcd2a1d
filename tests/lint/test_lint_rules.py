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

# Every example of every rule: (rule, source, lines it must fire at; () for a near-miss)
EXAMPLES = [
    pytest.param(cls, example.code, example.lines, id=f"{cls.id}-invalid-{i}")
    for cls in RULES
    for i, example in enumerate(cls.invalid)
] + [
    pytest.param(cls, code, (), id=f"{cls.id}-valid-{i}") for cls in RULES for i, code in enumerate(cls.valid)
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


@pytest.mark.parametrize("cls, code, lines", EXAMPLES)
def test_example(cls, code, lines):
    """An invalid snippet fires at exactly its lines; a valid near-miss is quiet for every rule
    (a near-miss written for one rule must not be a false positive of another)."""
    findings, errors = lint_source(snippet(code), "example.py")
    assert not errors
    assert [(f.finding.id, f.line) for f in findings if f.finding.id != cls.id] == []
    assert sorted({f.line for f in findings}) == sorted(lines)
    for f in findings:
        assert f.finding.message and f.finding.cause and f.finding.fix
        assert f.finding.severity == catalog.get(cls.id).severity
        assert "`" in f.finding.message  # names the user's own objects


@pytest.mark.parametrize("cls", RULES, ids=lambda c: c.id)
def test_rule_docs_show_examples(cls):
    docs = rule_docs(cls.id)
    assert docs is not None
    assert f"## Lint rule `{cls.id}`" in docs
    assert docs.count("```python") == len(cls.invalid) + len(cls.valid)
    assert "Fires at line" in docs and "Stays quiet on" in docs


def test_rule_docs_unknown_id():
    assert rule_docs("loss-spike") is None


@pytest.mark.parametrize("optimizer, lr, limit", [
    ("torch.optim.AdamW", "2e-5", "0.0078: the norm weights (1.0) never change, nor do weights of a typical 0.02"),
    ("torch.optim.Adam", "cfg.lr", "0.12: the norm weights (1.0) never change"),  # 3e-4 from a dataclass config
    ("torch.optim.AdamW", "3e-3", None),  # a step of 3e-3 still moves a weight of 1.0 down
    ("torch.optim.SGD", "1e-5", None),  # an SGD step is lr times the gradient: its size is unknown here
])
def test_bf16_master_weights_says_which_weights_an_lr_sized_step_still_moves(optimizer: str, lr: str,
                                                                              limit: str | None) -> None:
    code = f"""
        import torch
        from dataclasses import dataclass
        from transformers import AutoModelForCausalLM

        @dataclass
        class Config:
            lr: float = 3e-4

        cfg = Config()
        model = AutoModelForCausalLM.from_pretrained(cfg_path, torch_dtype="bfloat16")
        optimizer = {optimizer}(model.parameters(), lr={lr})
        """
    (found,), _ = lint_source(snippet(code), "train.py")
    assert found.finding.id == "bf16-master-weights" and "loaded in `torch.bfloat16`" in found.finding.message
    if limit is None:
        assert "|w| <" not in found.finding.message
    else:
        assert f"a step, which a bfloat16 weight keeps only while |w| < {limit}" in found.finding.message
