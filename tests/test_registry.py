"""The registry, the catalog and the detector interface agree.

Every failure id has a catalog page, an example that must fire and one that must stay quiet;
every path a page, a detector, a lint rule or the registry cites exists; every detector and
lint rule module is named after its id.
"""

from __future__ import annotations

import dataclasses
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import traindoc.detectors as pkg
import traindoc.lint.rules as rules_pkg
from traindoc import catalog, detectors, explain, registry
from traindoc.lint.rules import RULES
from conftest import ROOT

IDS = registry.ids()


def test_modules_on_disk_match_the_registry() -> None:
    for package, units in ((pkg, detectors.DETECTORS), (rules_pkg, RULES)):
        on_disk = {m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")}
        registered = [cls.__module__.rsplit(".", 1)[1] for cls in units]
        assert sorted(registered) == sorted(on_disk)  # one unit per module


@pytest.mark.parametrize("cls", [*detectors.DETECTORS, *RULES], ids=lambda c: f"{c.__module__}")
def test_unit_file_is_named_after_its_id(cls: type) -> None:
    module = cls.__module__.rsplit(".", 1)[1]
    assert module == cls.id.replace("-", "_"), f"{cls.__module__} holds {cls.id}: rename the file"


def test_rules_have_their_examples_and_known_ids() -> None:
    for rule in RULES:
        assert rule.id in catalog.entries(), f"lint rule {rule.id} has no catalog entry"
        assert rule.invalid and rule.valid, f"lint rule {rule.id} needs snippets that fire and stay quiet"
        assert set(getattr(rule, "cause_of", ())) <= set(catalog.entries())


def test_the_registry_is_rooted_in_this_checkout() -> None:
    assert registry.root() == ROOT


@pytest.mark.parametrize("id_", IDS)
def test_id_has_a_page_and_examples_both_ways(id_: str) -> None:
    where = registry.where(id_)
    assert where.page, f"{id_} has no catalog page (src/traindoc/catalog/{id_}.md)"
    assert where.fires, f"{id_} has no example that must fire"
    assert where.quiet, f"{id_} has no example that must stay quiet"
    assert where.detector or where.lint_rules or id_ in registry.TESTED_ELSEWHERE, f"{id_}: nothing catches it"


@pytest.mark.parametrize("id_", IDS)
def test_registry_paths_exist(id_: str) -> None:
    missing = [p for p in registry.where(id_).paths() if not (ROOT / p).exists()]
    assert not missing, f"{id_} cites missing paths: {missing}"


def _citing() -> list[tuple[str, str]]:
    """(name, text) of every page and every detector and lint rule module."""
    out = [(f"catalog/{id_}.md", catalog.get(id_).body) for id_ in catalog.entries()]
    for cls in (*detectors.DETECTORS, *RULES):
        out.append((cls.__module__, inspect.getsource(sys.modules[cls.__module__])))
    return out


@pytest.mark.parametrize("name,text", _citing(), ids=[n for n, _ in _citing()])
def test_cited_paths_exist(name: str, text: str) -> None:
    missing = [p for p in registry.cited_paths(text) if not registry.resolve(p).exists()]
    assert not missing, f"{name} cites paths that do not exist: {missing}"


def test_cited_path_check_can_fail() -> None:
    cited = registry.cited_paths("as zoo/bf16_master.py shows, and golden/loss_spike.jsonl; see docs/logs.md.")
    assert cited == ["zoo/bf16_master.py", "golden/loss_spike.jsonl", "docs/logs.md"]
    assert [registry.resolve(p).exists() for p in cited] == [False, True, True]
    assert registry.resolve("demo_scripts/bf16_master.py").exists()


def test_where_finds_all_the_pieces_of_update_underflow() -> None:
    w = registry.where("update-underflow")
    assert w.page == "src/traindoc/catalog/update-underflow.md"
    assert w.detector == "src/traindoc/detectors/update_underflow.py"
    assert w.lint_rules == ("src/traindoc/lint/rules/bf16_master_weights.py",)  # the cause, by the rule's word
    assert "src/traindoc/live/probes/core.py" in w.probes  # parameter statistics
    assert "src/traindoc/sources/ckpt/produce.py" in w.readers
    assert "src/traindoc/demo_scripts/bf16_master.py" in w.fires
    assert "src/traindoc/demo_scripts/healthy_bf16_autocast.py" in w.quiet
    assert "tests/test_registry.py" in w.tests
    stale = registry.where("stale-bn-eval")
    assert stale.lint_rules == ("src/traindoc/lint/rules/stale_bn_eval.py",)
    assert any(p.startswith("src/traindoc/sources/logs/") for p in registry.where("loss-spike").readers)


def test_explain_where_prints_the_paths(capsys: pytest.CaptureFixture[str]) -> None:
    from traindoc.cli import main

    assert main(["explain", "update-underflow", "--where"]) == 0
    out = capsys.readouterr().out
    for path in registry.where("update-underflow").paths():
        assert path in out
    assert "(reports bf16-master-weights, the cause)" in out
    assert Path(ROOT / out.splitlines()[1].split()[-1]).exists()  # the page line's path
    assert main(["explain", "update-underflw", "--where"]) == 2
    assert "Did you mean update-underflow" in capsys.readouterr().err
    assert main(["explain", "--where"]) == 2
    assert explain.where("loss-spike").startswith("loss-spike: where its pieces are")


@pytest.mark.parametrize("cls", detectors.DETECTORS, ids=lambda c: c.id)
def test_detector_interface(cls: type) -> None:
    assert issubclass(cls, detectors.Detector), f"{cls.__name__} must subclass traindoc.detectors.Detector"
    assert cls.id in catalog.entries(), f"{cls.id} has no catalog entry"
    wanted = set(cls.needs) | set(cls.uses)
    assert wanted and all(isinstance(s, str) for s in wanted)  # no needs: any one of its uses
    assert dataclasses.is_dataclass(cls.Config) and cls.Config.__dataclass_params__.frozen
    fires = [e for e in cls.examples if e.fires_at is not None]
    quiet = [e for e in cls.examples if e.fires_at is None]
    assert fires and quiet, f"{cls.id} needs an example that fires and one that stays quiet"
    det = cls(cls.Config())
    assert list(det.finish() or ()) == []  # finishing with no events is quiet


def test_one_module_per_id() -> None:
    ids = [cls.id for cls in detectors.DETECTORS]
    assert len(ids) == len(set(ids))


def test_catalog_entries_parse_and_have_all_sections() -> None:
    for entry in catalog.entries().values():
        for section in ("What it detects", "Why it matters", "Common causes", "What to try", "False positives"):
            assert f"## {section}" in entry.body, f"{entry.id}: missing {section}"


def test_catalog_covers_the_shared_contract() -> None:
    shared = ROOT.parent / "shared" / "catalog.md"
    if not shared.exists():
        pytest.skip("the shared catalog is not beside this checkout")
    ids = set(re.findall(r"^\| `([a-z0-9-]+)` \|", shared.read_text(), re.M))
    assert ids and ids <= set(catalog.entries())


def test_unknown_id_suggests() -> None:
    with pytest.raises(KeyError, match="Did you mean update-underflow"):
        catalog.get("update-underflw")


def test_build_applies_config_overrides() -> None:
    (det,) = detectors.build(select=["loss-spike"], config={"loss-spike": {"factor": 4.0}})
    assert det.config.factor == 4.0
    with pytest.raises(ValueError, match="factor must be > 1"):
        detectors.build(select=["loss-spike"], config={"loss-spike": {"factor": 0.5}})
