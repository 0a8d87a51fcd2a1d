"""Every example of every registered detector: its tests and its docs are the same thing.

Golden streams are replayed through the detector alone; real logs go through `traindoc logs`
with the detector alone selected; a zoo example must agree with the zoo case's expectation
line (test_zoo.py runs those cases for real).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traindoc import detectors, record
import zoo_cases as zoo
from traindoc.analyze import analyze
from conftest import ROOT

TESTS = ROOT / "tests"

EXAMPLES = [(cls, ex) for cls in detectors.DETECTORS for ex in cls.examples]


@pytest.mark.parametrize("cls,example", EXAMPLES, ids=[f"{c.id}:{e.source}" for c, e in EXAMPLES])
def test_example(cls: type, example: object, tmp_path: Path) -> None:
    kind, _, name = example.source.partition("/")
    if example.source.endswith(".jsonl") or kind == "fixtures":
        if kind == "fixtures":  # a real log, read as `traindoc logs` reads it (columns whole)
            report = json.loads(_logs_json(TESTS / example.source, example.argv, cls.id, tmp_path))
            assert not report["disabled"], report["disabled"]
            fired = {f["id"]: f["step"] for f in report["findings"]}
        else:
            report = analyze(record.read(TESTS / example.source), select=[cls.id])
            assert not report.disabled, report.disabled
            fired = {f.id: f.step for f in report.findings}
        if example.fires_at is None:
            assert cls.id not in fired, f"{cls.id} fired on {name}"
        else:
            assert cls.id in fired, f"{cls.id} did not fire on {name}"
            if example.fires_at >= 0:
                assert fired[cls.id] == example.fires_at
    else:
        assert kind in ("zoo", "demo_scripts"), example.source
        case = zoo.case(name.removesuffix(".py"))
        if example.fires_at is None:
            assert cls.id not in case.expect
        else:
            assert cls.id in case.expect
            if example.fires_at >= 0 and case.expect[cls.id] is not None:
                assert case.expect[cls.id] == example.fires_at


def _logs_json(path: Path, argv: tuple[str, ...], id_: str, tmp: Path) -> str:
    from traindoc.cli import main

    out = tmp / "report.json"
    rc = main(["logs", str(path), *argv, "--select", id_, "--json", str(out)])
    assert rc == 0, rc
    return out.read_text(encoding="utf-8")
