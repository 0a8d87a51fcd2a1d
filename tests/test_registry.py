"""The registry, the catalog and the detector interface agree."""

from __future__ import annotations

import dataclasses
import pkgutil
import re

import pytest

import traindoc.detectors as pkg
from traindoc import catalog, detectors
from conftest import ROOT


def test_modules_on_disk_match_the_registry() -> None:
    on_disk = {m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")}
    registered = {cls.__module__.rsplit(".", 1)[1] for cls in detectors.DETECTORS}
    assert on_disk == registered


@pytest.mark.parametrize("cls", detectors.DETECTORS, ids=lambda c: c.id)
def test_detector_interface(cls: type) -> None:
    assert cls.id in catalog.entries(), f"{cls.id} has no catalog entry"
    wanted = set(cls.needs) | set(getattr(cls, "uses", ()))
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
