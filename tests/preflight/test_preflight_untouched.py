"""Preflight replaces nothing the script can see of torch: its launches observe through torch's
private entries (the autograd engine's, the file steps of torch.save and torch.load) and a
``TorchFunctionMode`` for the first loss, so a TorchScript model calling F.cross_entropy
compiles, and a tensor subclass's ``__torch_function__`` sees each call once, as with
``python``. The scripts (scripts/) record, at their first steps in every launch, which names of
torch hold a function of traindoc's."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

from conftest import ENV, run

SCRIPTS = Path(__file__).resolve().parent / "scripts"
# Preflight's own patches (docs/preflight.md), and the baseline launch's live probes' (docs/live-patches.md)
PREFLIGHT = {("torch.autograd", "_engine_run_backward"), ("torch.serialization", "_open_zipfile_writer"),
             ("torch.serialization", "_open_file_like")}
LIVE = {("torch.serialization", name) for name in ("_save", "_legacy_save", "_load", "_legacy_load")}
if sys.version_info < (3, 12):  # no sys.monitoring: live times the collectives with a wrapper
    LIVE |= {("torch.distributed", name) for name in (
        "all_reduce", "all_gather", "all_gather_single", "all_gather_into_tensor", "broadcast", "reduce",
        "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor", "all_to_all_single",
        "_broadcast_coalesced")}


def _preflight(tmp_path: Path, script: str) -> tuple[dict[str, dict], list[set[tuple[str, str]]]]:
    out = tmp_path / "untouched.jsonl"
    report = tmp_path / "pf.json"
    ran = run([sys.executable, "-m", "traindoc", "preflight", "--json", str(report), str(SCRIPTS / script)],
              cwd=tmp_path, timeout=300, env={**ENV, "UNTOUCHED_OUT": str(out)})
    assert ran.returncode == 0, ran.stderr[-3000:]
    probes = {v["probe"]: v for v in json.loads(report.read_text())["preflight"]["probes"]}
    seen = [{tuple(n) for n in json.loads(line)["ours"]} for line in out.read_text().splitlines()]
    return probes, seen


@pytest.mark.parametrize("script", ["scripted_classifier.py", "subclass_classifier.py"])
def test_preflight_replaces_nothing_the_script_sees(tmp_path: Path, script: str) -> None:
    probes, seen = _preflight(tmp_path, script)
    assert len(seen) >= 3 * 4  # the first steps of the baseline, overfit and LR launches at least
    for names in seen:
        assert names <= PREFLIGHT | LIVE, sorted(names - PREFLIGHT - LIVE)
        assert PREFLIGHT <= names  # the check sees preflight's own patches: it can fail
    for probe in ("gradients", "overfit", "eval", "lr"):
        assert probes[probe]["status"] == "pass", probes[probe]


def test_a_torchscript_loss_runs_and_is_not_judged(tmp_path: Path) -> None:
    """TorchScript calls no mode: the loss inside the scripted module is not seen, and the probe
    says so instead of guessing."""
    probes, _ = _preflight(tmp_path, "scripted_classifier.py")
    assert probes["initial-loss"]["status"] == "n/a"
    assert probes["initial-loss"]["summary"].startswith("no cross_entropy")


def test_a_subclass_loss_is_measured_once(tmp_path: Path) -> None:
    """The subclass dispatches Tensor.backward back through torch: a wrapper on it counted every
    loss twice (the overfit launch started at 2.7 for 4 classes, and failed)."""
    probes, _ = _preflight(tmp_path, "subclass_classifier.py")
    assert probes["initial-loss"]["status"] == "pass"
    first = float(re.search(r"repeated batch: ([\d.]+) ->", probes["overfit"]["summary"]).group(1))
    assert abs(first - math.log(4)) < 0.15, probes["overfit"]["summary"]
    assert probes["resume"]["status"] == "pass", probes["resume"]
