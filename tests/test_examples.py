"""Every example of every registered detector: its tests and its docs are the same thing.

Golden streams are replayed through the detector alone; a zoo example must agree with the zoo
case's expectation line (test_zoo.py runs those cases for real).
"""

from __future__ import annotations

import pytest

from traindoc import detectors, record, zoo
from traindoc.analyze import analyze
from conftest import ROOT

TESTS = ROOT / "tests"

EXAMPLES = [(cls, ex) for cls in detectors.DETECTORS for ex in cls.examples]


@pytest.mark.parametrize("cls,example", EXAMPLES, ids=[f"{c.id}:{e.source}" for c, e in EXAMPLES])
def test_example(cls: type, example: object) -> None:
    kind, _, name = example.source.partition("/")
    if example.source.endswith(".jsonl"):
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
        assert kind == "zoo", example.source
        case = zoo.case(name.removesuffix(".py"))
        if example.fires_at is None:
            assert cls.id not in case.expect
        else:
            assert cls.id in case.expect
            if example.fires_at >= 0 and case.expect[cls.id] is not None:
                assert case.expect[cls.id] == example.fires_at
