"""The JSON report: validates against the JSON Schema shipped in the package, carries each
signal's curve (bounded, spikes kept), and re-renders with `traindoc report` as text, HTML and
JSON without the run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest
from report_cases import FACES, case, face_cases

from traindoc.cli import main
from traindoc.curves import BUCKETS
from traindoc.engine import Engine
from traindoc.events import RunEnd, RunStart, Scalar
from traindoc.report import json as json_report
from traindoc.report import text


@face_cases
def test_every_face_writes_a_valid_report_with_series(name: str) -> None:
    data = case(name).data()
    jsonschema.Draft202012Validator.check_schema(json_report.schema())
    jsonschema.validate(data, json_report.schema())
    assert data["schema_version"] == json_report.SCHEMA_VERSION
    if name != "ckpt":  # a checkpoint pair has no per-step curve
        assert data["series"]["loss"]["points"] > 0


def test_a_long_run_keeps_a_bounded_series_and_its_spike() -> None:
    engine = Engine([])
    engine.feed(RunStart(source="test"))
    steps = 200_000
    for i in range(steps):
        engine.feed(Scalar(i, "loss", 50.0 if i == 123_457 else (math.nan if i == 99_999 else 2.0 - i * 1e-6)))
    engine.feed(RunEnd(steps=steps))
    data = json_report.to_dict(engine.finish())
    jsonschema.validate(data, json_report.schema())
    loss = data["series"]["loss"]
    assert loss["points"] == steps and len(loss["steps"]) <= 2 * BUCKETS
    assert max(loss["values"]) == 50.0 and loss["steps"][loss["values"].index(50.0)] == 123_457
    assert [99_999, "nan"] in loss["nonfinite"]
    assert loss["width"] * BUCKETS >= steps


def test_schema_rejects_a_report_without_its_version() -> None:
    data = case("analyze").data()
    del data["schema_version"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, json_report.schema())


@pytest.mark.parametrize("name", FACES)
def test_report_face_rerenders_the_same_report(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    c = case(name)
    data = c.data()
    again = tmp_path / "again.json"
    page = tmp_path / "again.html"
    code = main(["report", str(c.json), "--json", str(again), "--html", str(page)])
    err = capsys.readouterr().err
    assert code == 0
    assert json.loads(again.read_text()) | {"traindoc": ""} == data | {"traindoc": ""}
    assert page.read_text() == c.html.read_text()
    for f in data["findings"]:
        assert f"{f['id']} (step {f['step']})" in err if f["step"] is not None else f["id"] in err
    assert text.lines(json_report.from_dict(data)) == err.rstrip("\n").split("\n")


def test_report_face_fail_on_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(case("analyze").json), "--fail-on", "warning"]) == 3
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "Error: " in err and "Traceback" not in err


def test_a_schema_1_report_still_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = case("analyze").data()
    old = {k: v for k, v in data.items() if k not in ("series", "params", "schema_version")} | {"schema": 1}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert main(["report", str(path), "--html", str(tmp_path / "old.html")]) == 0
    assert "loss-spike (step 30)" in capsys.readouterr().err
    assert "finding-loss-spike" in (tmp_path / "old.html").read_text()
