"""The terminal report (rich): findings grouped by severity, then what ran and what could not."""

from __future__ import annotations

import sys
from typing import TextIO

from traindoc.engine import Report
from traindoc.findings import SEVERITIES, Finding

_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}


def live_line(f: Finding) -> str:
    """The one line printed to stderr the moment a finding first fires."""
    at = f" at step {f.step}" if f.step is not None else ""
    return f"traindoc: [{f.severity}] {f.id}{at}: {f.message}"


def render(report: Report, file: TextIO | None = None, *, width: int | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(file=file or sys.stderr, width=width, highlight=False, soft_wrap=False)
    run = report.run
    head = f"traindoc report: {run.get('script') or run.get('source', '')}"
    unit = "epochs" if run.get("x") == "epoch" else "steps"
    bits = [f"{run.get('steps', 0)} {unit}"]
    if run.get("optimizer_steps") is not None:
        bits[0] += f" ({run['optimizer_steps']} optimizer steps took effect)"
    duration = run.get("duration_s")
    if isinstance(duration, (int, float)):
        bits.append(f"{duration:.1f} s")
    if run.get("status") not in (None, "ok"):
        bits.append(f"status {run['status']}")
    console.rule("[bold]traindoc report[/]")
    console.print(f"{escape(head.removeprefix('traindoc report: '))}: {', '.join(bits)}")
    if run.get("trained") is False:
        code = f", exit code {run['exit_code']}" if run.get("exit_code") else ""
        console.print(f"No training was observed: the script ended (status {run.get('status', 'ok')}{code}) "
                      "before any backward() or optimizer step, so there was nothing to diagnose.")
    elif not report.findings and report.disabled:
        console.print(f"No findings from the detectors that ran, but {len(report.disabled)} part(s) were "
                      "disabled after an internal error (below): failures they watch could not be seen.")
    elif not report.findings:
        console.print("No findings: nothing in this run looks broken to the detectors that ran.")
    for sev in SEVERITIES:
        group = [f for f in report.findings if f.severity == sev]
        if not group:
            continue
        console.print(f"\n[{_STYLE[sev]}]{len(group)} {sev}{'s' if len(group) > 1 else ''}[/]")
        for f in group:
            at = f" (step {f.step})" if f.step is not None else ""
            console.print(f"[{_STYLE[sev]}]{f.id}[/]{at}: [bold]{escape(f.title)}[/]")
            console.print(f"  [dim]evidence:[/] {escape(f.message)}")
            if f.where:
                console.print(f"  [dim]where:[/]    {escape(', '.join(f.where[:8]))}")
            console.print(f"  [dim]cause:[/]    {escape(f.cause)}")
            console.print(f"  [dim]fix:[/]      {escape(f.fix)}")
    console.print()
    for id_, error in report.disabled:
        console.print(f"[red]disabled after an internal error:[/] {escape(id_)}: {escape(error)}")
    if run.get("trained") is False:
        return  # which detectors applied says nothing about a run that never trained
    console.print(f"[dim]ran:[/] {escape(', '.join(report.ran)) or 'none'}")
    if report.not_applicable:
        console.print("[dim]not applicable:[/]")
        for id_, reason in report.not_applicable:
            console.print(f"  {escape(id_)}: {escape(reason)}")
