"""The bulk CSV reader hands its columns on as numpy arrays (no ``tolist`` of a million rows);
the report must be the one the general reader's lists give, finding for finding, number for
number, and plain JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import log_runs
import log_writers
from traindoc.cli import main
from traindoc.sources.logs import csv_file


def _report(path: Path, out: Path, options: tuple[str, ...]) -> dict:  # type: ignore[type-arg]
    assert main(["logs", str(path), "--json", str(out), *options]) in (0, 3)
    report = json.loads(out.read_text())
    for key in ("started", "duration_s", "argv"):
        report["run"].pop(key, None)
    report.pop("timing", None)
    return report  # type: ignore[no-any-return]


@pytest.mark.parametrize("fmt", ["csv", "lightning"])
@pytest.mark.parametrize("id_", sorted(log_runs.PLANTED))
def test_bulk_and_general_readers_report_alike(id_: str, fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    plant, options = log_runs.PLANTED[id_]
    path = log_writers.write(fmt, plant(log_runs.healthy()), tmp_path)
    general = _report(path, tmp_path / "general.json", options)
    monkeypatch.setattr(csv_file, "_BULK_ROWS", 0)  # the bulk path for 300 rows too
    bulk = _report(path, tmp_path / "bulk.json", options)
    capsys.readouterr()
    assert id_ in {f["id"] for f in bulk["findings"]}
    assert bulk == general


def test_one_blas_thread_unless_the_user_chose(tmp_path: Path) -> None:
    """numpy's BLAS threads make the CSV reader's thin products 150x slower on a busy machine:
    `traindoc logs` keeps one, unless the environment says otherwise."""
    import os
    import subprocess
    import sys

    log = tmp_path / "log.csv"
    log.write_text("step,loss\n0,1.0\n1,0.9\n2,0.8\n")
    code = ("import os, sys; from traindoc.cli import main; main(['logs', sys.argv[1]]); "
            "print(os.environ.get('OPENBLAS_NUM_THREADS'))")
    base = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    for preset, want in (({}, "1"), ({"OPENBLAS_NUM_THREADS": "3"}, "3")):
        out = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True,
                             env={**base, **preset}, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == want


def test_cells_without_a_digit_are_read_as_float_reads_them(tmp_path: Path) -> None:
    """nan, inf, -inf, NaN, Infinity: one float() per distinct text, the same values the general
    reader gives; a word that is no number still sends the file to the general reader."""
    import math

    from traindoc.sources.logs import _csv_fast

    texts = ["nan", "inf", "-inf", "NaN", "Infinity", "+inf", "1.5", "2"]
    rows = "".join(f"{i},{texts[i % len(texts)]},{i * 0.5}\n" for i in range(3000))
    text = "step,loss,lr\n" + rows
    grid, _ = _csv_fast.split(text, "step,loss,lr", ",")  # type: ignore[misc]
    col = _csv_fast.numbers(grid, 1)
    assert col is not None
    want = [float(texts[i % len(texts)]) for i in range(3000)]
    assert all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(col.values.tolist(), want))
    assert _csv_fast.numbers(grid, 0, want_ints=True).ints is not None  # type: ignore[union-attr]
    bad = text.replace("\n7,2,", "\n7,n/a,")
    grid, _ = _csv_fast.split(bad, "step,loss,lr", ",")  # type: ignore[misc]
    assert _csv_fast.numbers(grid, 1) is None
