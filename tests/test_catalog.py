"""The catalog is the one place a failure is described, and it says which faces are built.

faces.json must be what the tests' evidence gives today; `traindoc explain` must print exactly
those faces; every page has the same sections; a page that names an unbuilt face says so.
"""

from __future__ import annotations

import json
import re

import pytest

import zoo_cases as zoo
from conftest import ROOT
from traindoc import catalog, explain, registry
from traindoc.catalog import finding

IDS = list(catalog.entries())


def test_faces_json_is_current() -> None:
    committed = json.loads((ROOT / "src" / "traindoc" / "catalog" / "faces.json").read_text(encoding="utf-8"))
    assert committed == registry.compute(zoo.cases()), "run `python tools/coverage.py --write`"
    assert set(committed) == set(IDS)


def test_evidence_outside_the_registries_is_tested() -> None:
    for id_, faces in registry.TESTED_ELSEWHERE.items():
        for face, path in faces.items():
            assert face in catalog.FACES
            assert f'"{id_}"' in (ROOT / path).read_text(encoding="utf-8"), f"{path} does not test {id_}"


@pytest.mark.parametrize("id_", IDS)
def test_page_has_the_sections_in_order(id_: str) -> None:
    entry = catalog.get(id_)
    headings = re.findall(r"^## (.+)$", entry.body, re.M)
    assert headings == list(catalog.SECTIONS), f"{id_}: sections {headings}"
    for name in catalog.SECTIONS:
        assert entry.section(name), f"{id_}: empty section {name}"
    assert entry.cause and entry.fix  # a finding's defaults
    assert set(entry.sources) <= set(catalog.FACES)


@pytest.mark.parametrize("id_", IDS)
def test_explain_lists_the_built_faces(id_: str) -> None:
    out = explain.text(id_)
    section = out.split(explain.FACES_HEADING, 1)[1].split("\n## ", 1)[0]
    listed = {}
    for line in section.splitlines():
        m = re.match(r"- (\w+) \(.*\): (.+)$", line)
        if m:
            assert m.group(2) in (explain.BUILT, explain.NOT_BUILT), line
            listed[m.group(1)] = m.group(2) == explain.BUILT
    built = set(json.loads((ROOT / "src" / "traindoc" / "catalog" / "faces.json").read_text(encoding="utf-8"))[id_])
    assert {f for f, b in listed.items() if b} == built
    assert {f for f, b in listed.items() if not b} == set(catalog.get(id_).sources) - built


# A page naming an unbuilt face must say it is not built yet (and speak of it in the future).
MENTIONS = {"preflight": r"\b[Pp]reflight\b", "lint": r"\b[Ll]int\b", "live": r"\bLive,"}


@pytest.mark.parametrize("id_", IDS)
def test_page_marks_unbuilt_faces(id_: str) -> None:
    entry = catalog.get(id_)
    for face, built in catalog.faces(id_).items():
        if not built and face in MENTIONS and re.search(MENTIONS[face], entry.body):
            said = "not built yet" in entry.body or "No face detects it yet" in entry.body
            assert said, f"{id_}: names {face}, which is not built yet"
    if not any(catalog.faces(id_).values()):
        assert "No face detects it yet" in entry.section("What it detects"), id_


def test_finding_takes_cause_and_fix_from_the_page_unless_given() -> None:
    f = finding("loss-spike", message="loss 9 at step 3")
    entry = catalog.get("loss-spike")
    assert (f.title, f.cause, f.fix) == (entry.title, entry.cause, entry.fix)
    assert "numerically unstable op" in f.cause and "--guard" in f.fix  # the page's lead paragraphs
    g = finding("loss-spike", message="m", cause="c", fix="x")
    assert (g.cause, g.fix) == ("c", "x")
