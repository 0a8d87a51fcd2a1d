"""Every logs detector on every log format: its failure planted in a run fires it, at the same
step whatever the format, and the healthy run stays quiet (no finding from any detector).
A log that lacks a detector's signal lists the detector as not applicable, with the reason.

The logs are generated (log_runs.py: the runs; log_writers.py: CSV in seed 000's naming,
Lightning's metrics.csv, TensorBoard event files written by TensorBoard's own writer, Hugging
Face's trainer_state.json, nested JSONL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import log_runs
import log_writers
from traindoc import catalog, detectors
from traindoc.cli import main

LOGS_IDS = sorted(i for i in detectors.by_id() if "logs" in catalog.get(i).sources)


def _report(path: Path, out: Path, *options: str) -> dict:  # type: ignore[type-arg]
    code = main(["logs", str(path), "--json", str(out), *options])
    assert code in (0, 3), code
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _fired(report: dict) -> dict[str, int | None]:  # type: ignore[type-arg]
    return {f["id"]: f["step"] for f in report["findings"]}


def _not_applicable(report: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {x["id"]: x["reason"] for x in report["not_applicable"]}


def _write(fmt: str, run: log_writers.Run, folder: Path) -> Path:
    if fmt == "tensorboard":
        pytest.importorskip("tensorboard")
    return log_writers.write(fmt, run, folder)


def test_every_logs_detector_has_a_planted_failure() -> None:
    assert sorted(log_runs.PLANTED) == LOGS_IDS


_steps: dict[str, dict[str, int | None]] = {}  # id -> format -> the step it fired at


@pytest.mark.parametrize("fmt", log_writers.FORMATS)
@pytest.mark.parametrize("id_", sorted(log_runs.PLANTED))
def test_planted_failure_fires(id_: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plant, options = log_runs.PLANTED[id_]
    path = _write(fmt, plant(log_runs.healthy()), tmp_path)
    report = _report(path, tmp_path / "r.json", *options)
    capsys.readouterr()
    found = _fired(report)
    assert id_ in found, f"{id_} on {fmt}: got {found}; mapping {report['run']['logs']['mapping']}"
    assert id_ not in _not_applicable(report)
    seen = _steps.setdefault(id_, {})
    seen[fmt] = found[id_]
    assert len(set(seen.values())) == 1, f"{id_} fires at different steps by format: {seen}"


@pytest.mark.parametrize("fmt", log_writers.FORMATS)
def test_healthy_run_is_quiet(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(fmt, log_runs.healthy(), tmp_path)
    report = _report(path, tmp_path / "r.json", *log_runs.HEALTHY_OPTIONS)
    err = capsys.readouterr().err
    assert report["findings"] == [], [f["message"] for f in report["findings"]]
    assert set(LOGS_IDS) <= set(report["ran"]), set(LOGS_IDS) - set(report["ran"])  # all judged it
    logs = report["run"]["logs"]
    assert set(logs["mapping"]) == set(log_runs.healthy()) and not logs["unmapped"]
    assert "unmapped" not in err


@pytest.mark.parametrize("fmt", log_writers.FORMATS)
def test_missing_signals_make_detectors_not_applicable(fmt: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A log of the loss alone: each detector that reads another signal says which it lacks."""
    run = {"loss": log_runs.healthy()["loss"]}
    report = _report(_write(fmt, run, tmp_path), tmp_path / "r.json")
    capsys.readouterr()
    reasons = _not_applicable(report)
    for id_ in LOGS_IDS:
        det = detectors.by_id()[id_]
        # The engine's rule: the needs, or, with none, any one of the uses.
        uses = getattr(det, "uses", frozenset())
        lacking = sorted(det.needs - {"loss"}) if det.needs else [] if "loss" in uses else sorted(uses)
        if not lacking:
            assert id_ in report["ran"], id_
            continue
        assert id_ in reasons, f"{id_} not listed as not applicable on a loss-only {fmt} log"
        assert f"this run showed no {lacking[0]}" in reasons[id_], reasons[id_]
