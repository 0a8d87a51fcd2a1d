"""A probe is installed only when a selected detector reads its signals (issue 27, point 5):
selecting fewer detectors puts up fewer instruments, and the detectors that run find the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traindoc import detectors
from traindoc.events import SIGNALS
from traindoc.live.probes import PROBES, Probe, Probes, selected
from traindoc.live.session import Session

ZOO = Path(__file__).resolve().parents[2] / "zoo"
REQUIRED = [cls.name for cls in PROBES if cls.required]


def test_every_probe_is_a_probe_with_a_name_and_signals() -> None:
    names = [cls.name for cls in PROBES]
    assert len(names) == len(set(names))
    read = {s for cls in detectors.DETECTORS for s in (*cls.needs, *getattr(cls, "uses", ()))}
    for cls in PROBES:
        assert issubclass(cls, Probe) and cls.name and cls.signals
        # every signal a probe declares is an event signal, the script's metrics, or a named
        # metric a detector reads
        assert all(s in SIGNALS or s == "metrics" or s in read for s in cls.signals), cls


def test_the_step_clock_feeds_are_always_installed() -> None:
    assert set(REQUIRED) == {"core", "clipping", "amp", "manual"}
    assert [cls.name for cls in selected([])] == REQUIRED
    assert selected(None) == list(PROBES)


@pytest.mark.parametrize(("ids", "extra"), [
    (["divergence", "loss-spike"], []),
    (["masked-nonfinite"], ["masking"]),  # activations
    (["val-at-chance"], ["metrics", "eval_metrics"]),  # the script's own metrics
    (["metric-out-of-range"], ["metrics", "routers", "eval_metrics"]),  # router stats are named metrics
    (["checkpoint-not-atomic"], ["checkpoints"]),
    (["data-starvation"], ["data"]),
    (["missing-zero-grad", "scheduler-before-optimizer"], ["accumulation", "loop"]),
])
def test_a_selection_installs_what_its_detectors_read(ids: list[str], extra: list[str]) -> None:
    session = Session(select=ids)
    names = Probes(session).names
    assert sorted(names) == sorted(REQUIRED + extra)


def test_all_detectors_install_every_probe_and_a_recording_does_too() -> None:
    assert Probes(Session()).names == [cls.name for cls in PROBES]
    assert Probes(Session(select=["divergence"]), everything=True).names == [cls.name for cls in PROBES]


def _run(tmp_path: Path, name: str, *args: str) -> dict[str, object]:
    out = tmp_path / f"{name}{len(args)}.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "traindoc", "run", "--json", str(out), *args, str(ZOO / f"{name}.py")],
                   env=env, check=False, capture_output=True, timeout=300)
    return json.loads(out.read_text())


def _found(report: dict[str, object], ids: set[str]) -> list[tuple[str, int]]:
    return sorted((f["id"], f["step"]) for f in report["findings"] if f["id"] in ids)  # type: ignore[index, union-attr]


def test_a_selected_detector_finds_the_same_with_fewer_probes(tmp_path: Path) -> None:
    both = {"divergence", "exploding-gradients"}
    full = _run(tmp_path, "divergence")
    few = _run(tmp_path, "divergence", "--select", ",".join(sorted(both)))
    assert _found(full, both) == _found(few, both) == [("divergence", 29), ("exploding-gradients", 0)]
