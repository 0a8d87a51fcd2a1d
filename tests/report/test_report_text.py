"""The terminal report: findings first, worst first; "not applicable" one line unless --verbose;
wrapped at the terminal's width only on a terminal; colored only on a terminal without
NO_COLOR; a healthy run fits one 80x24 screen."""

from __future__ import annotations

import io
import json
import re

import pytest
from report_cases import case

from traindoc.engine import Report
from traindoc.findings import Finding
from traindoc.report import json as json_report
from traindoc.report import text

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def saved(name: str):  # type: ignore[no-untyped-def]
    return json_report.from_dict(json.loads(case(name).json.read_text()))


def test_a_healthy_run_fits_one_80x24_screen() -> None:
    c = case("healthy")
    data = c.data()
    assert not [f for f in data["findings"] if f["severity"] in ("error", "warning")], c.stderr[-2000:]
    assert data["not_applicable"] and data["ran"]
    out = Tty()
    text.render(saved("healthy"), out, width=80)
    lines = ANSI.sub("", out.getvalue()).rstrip("\n").split("\n")
    assert len(lines) <= 24 and max(map(len, lines)) <= 80, "\n".join(lines)
    assert any(line.startswith("not applicable: ") for line in lines)


def test_findings_first_worst_first_and_not_applicable_collapsed() -> None:
    report = saved("run-bf16")
    lines = text.lines(report)
    severities = [f.severity for f in report.findings]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    positions = [next(i for i, line in enumerate(lines) if line.startswith(f.id)) for f in report.findings]
    assert positions == sorted(positions) and positions[0] < 5
    na = [line for line in lines if line.startswith("not applicable")]
    assert na == [f"not applicable: {len(report.not_applicable)} detectors; this run lacked the signals "
                  "they read (--verbose lists them)"]
    verbose = text.lines(report, verbose=True)
    for id_, reason in report.not_applicable:
        assert f"  {id_}: {reason}" in verbose


def test_no_wrap_and_no_color_in_a_file_or_ci_log() -> None:
    report = saved("run-bf16")
    out = io.StringIO()
    text.render(report, out)
    page = out.getvalue()
    assert "\x1b[" not in page
    for f in report.findings:  # each message whole on its line, however long
        assert f"  evidence: {f.message}\n" in page
    assert any(len(line) > 200 for line in page.split("\n"))


def test_a_terminal_wraps_at_its_width_and_colors_unless_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    report = saved("run-bf16")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Tty()
    text.render(report, out, width=60)
    assert "\x1b[1;31m" in out.getvalue()
    plain = ANSI.sub("", out.getvalue()).split("\n")
    assert max(map(len, plain)) <= 60
    evidence = next(i for i, line in enumerate(plain) if line.startswith("  evidence: "))
    assert plain[evidence + 1].startswith(" " * 12)  # continuation lines hang under the text
    monkeypatch.setenv("NO_COLOR", "1")
    out = Tty()
    text.render(report, out, width=60)
    assert "\x1b[" not in out.getvalue()


def test_where_shows_eight_names_and_every_file_line() -> None:
    """Thirty frozen parameters are summed up after eight; the lines that define their layers
    (and a backward's file:line) are never in the "more"."""
    names = tuple(f"blocks.{i}.fc.weight" for i in range(30))
    finding = Finding("frozen-parameters", "warning", "t", "m", "c", "f", where=(*names, "model.py:12", "model.py:40"))
    out = io.StringIO()
    text.render(Report(run={}, findings=[finding], ran=[], not_applicable=[]), out)
    where = next(line for line in out.getvalue().split("\n") if line.lstrip().startswith("where:"))
    assert where.endswith("blocks.7.fc.weight and 22 more, model.py:12, model.py:40"), where
