"""The terminal report: findings first, worst first; what ran and what could not, one line each.

On a terminal the text wraps at its width with a hanging indent and severities are colored
(never with ``NO_COLOR``); in a file or a CI log nothing is wrapped and nothing is colored, so
a line can be searched for whole. ``verbose`` lists the detectors that were not applicable.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from typing import TextIO

from traindoc.engine import Report
from traindoc.findings import SEVERITIES, Finding
from traindoc.report import safe

_FILE_LINE = re.compile(r"\.py:\d+")
_COLOR = {"error": "1;31", "warning": "1;33", "info": "1;36", "dim": "2", "bold": "1"}
_LABEL = 10  # "  evidence: " is 2 + 10 characters


def live_line(f: Finding) -> str:
    """The one line printed to stderr the moment a finding first fires."""
    at = f" at step {f.step}" if f.step is not None else ""
    return safe.terminal(f"traindoc: [{f.severity}] {f.id}{at}: {f.message}")


def is_tty(file: TextIO) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


class _Page:
    """Lines for one output: wrapped to ``width`` (None: never) and colored when ``color``."""

    def __init__(self, width: int | None, color: bool) -> None:
        self.width, self.color = width, color
        self.lines: list[str] = []

    def paint(self, text: str, style: str) -> str:
        return f"\x1b[{_COLOR[style]}m{text}\x1b[0m" if self.color else text

    def add(self, text: str = "", *, indent: int = 0, lead: str = "", lead_style: str = "dim") -> None:
        """One logical line: ``lead`` (a label) then ``text``, continuation lines indented.
        Both are escaped here, the one place every line passes (names come from user files)."""
        text, lead = safe.terminal(text), safe.terminal(lead)
        if self.width is None or len(lead) + len(text) <= self.width:
            self.lines.append(self.paint(lead, lead_style) + text if lead else text)
            return
        wrapped = textwrap.wrap(lead + text, width=max(self.width, 20), subsequent_indent=" " * indent,
                                break_on_hyphens=False, break_long_words=True) or [""]
        if lead and wrapped[0].startswith(lead):
            wrapped[0] = self.paint(lead, lead_style) + wrapped[0][len(lead):]
        self.lines.extend(wrapped)


def render(report: Report, file: TextIO | None = None, *, width: int | None = None,
           color: bool | None = None, verbose: bool = False) -> None:
    """Write the report to ``file`` (stderr). ``width``: wrap there (default: the terminal's
    width on a terminal, no wrapping otherwise); ``color``: default on a terminal without
    ``NO_COLOR``."""
    out = file or sys.stderr
    tty = is_tty(out)
    if width is None and tty:
        width = shutil.get_terminal_size().columns
    if color is None:
        color = tty and not os.environ.get("NO_COLOR")
    out.write("\n".join(lines(report, width=width, color=color, verbose=verbose)) + "\n")


# What "no training" means: what traindoc watches, and RPC training, which it does not.
NO_TRAINING = ("with no backward() through torch.autograd and no step of a torch.optim optimizer, so there "
               "was nothing to diagnose (RPC training, torch.distributed.autograd with DistributedOptimizer, "
               "is not watched).")


def lines(report: Report, *, width: int | None = None, color: bool = False, verbose: bool = False) -> list[str]:
    page = _Page(width, color)
    run = report.run
    unit = "epochs" if run.get("x") == "epoch" else "steps"
    bits = [f"{run.get('steps', 0)} {unit}"]
    if run.get("optimizer_steps") is not None:
        bits[0] += f" ({run['optimizer_steps']} optimizer steps took effect)"
    duration = run.get("duration_s")
    if isinstance(duration, (int, float)):
        bits.append(f"{duration:.1f} s")
    if run.get("status") not in (None, "ok"):
        bits.append(f"status {run['status']}")
    name = run.get("script") or run.get("source", "")
    page.add(f"{name}: {', '.join(bits)}", lead="traindoc report: ", lead_style="bold", indent=2)
    if run.get("trained") is False:
        code = f", exit code {run['exit_code']}" if run.get("exit_code") else ""
        page.add(f"No training was observed: the script ended (status {run.get('status', 'ok')}{code}) "
                 f"{NO_TRAINING}")
    elif not report.findings and report.disabled:
        page.add(f"No findings from the detectors that ran, but {len(report.disabled)} part(s) were "
                 "disabled after an internal error (below): failures they watch could not be seen.")
    elif not report.findings:
        page.add("No findings: nothing in this run looks broken to the detectors that ran.")
    for sev in SEVERITIES:
        group = [f for f in report.findings if f.severity == sev]
        if not group:
            continue
        page.add()
        page.add(lead=f"{len(group)} {sev}{'s' if len(group) > 1 else ''}", lead_style=sev)
        for f in group:
            _finding(page, f)
    page.add()
    for id_, error in report.disabled:
        page.add(f"{id_}: {error}", lead="disabled after an internal error: ", lead_style="error", indent=2)
    if run.get("trained") is False:
        return page.lines  # which detectors applied says nothing about a run that never trained
    page.add(", ".join(report.ran) or "none", lead=f"ran ({len(report.ran)}): ", indent=2)
    if report.not_applicable and verbose:
        page.add(lead=f"not applicable ({len(report.not_applicable)}):")
        for id_, reason in report.not_applicable:
            page.add(f"{id_}: {reason}", lead="  ", indent=4)
    elif report.not_applicable:
        page.add(f"{len(report.not_applicable)} detectors; this run lacked the signals they read "
                 "(--verbose lists them)", lead="not applicable: ", indent=2)
    return page.lines


def _finding(page: _Page, f: Finding) -> None:
    at = f" (step {f.step})" if f.step is not None else ""
    page.add(f"{at}: {f.title}", lead=f.id, lead_style=f.severity, indent=2)
    hang = 2 + _LABEL
    page.add(f.message, lead="  evidence: ", indent=hang)
    if f.where:
        # file:line entries (a backward's, a layer's definition) always show; names up to 8
        lines = [w for w in f.where if _FILE_LINE.search(w)]
        names = [w for w in f.where if not _FILE_LINE.search(w)]
        more = f" and {len(names) - 8} more" if len(names) > 8 else ""
        shown = [", ".join(names[:8]) + more] if names else []
        page.add(", ".join(shown + lines), lead="  where:    ", indent=hang)
    page.add(f.cause, lead="  cause:    ", indent=hang)
    page.add(f.fix, lead="  fix:      ", indent=hang)
