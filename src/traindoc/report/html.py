"""A self-contained HTML report: one file, no script, no external asset, to attach to a bug.

Each finding shows the curves its evidence rests on (inline SVG, trigger step marked, threshold
drawn where the evidence gives one), the per-tensor numbers of the parameters it names, then
its cause and fix; a run overview follows (loss, LR, gradient norm, throughput where known).
Readable on a phone (fluid width) and in dark mode (``prefers-color-scheme``).
"""

from __future__ import annotations

import json
from typing import Mapping, Sequence

from traindoc.engine import Report
from traindoc.findings import SEVERITIES, Finding
from traindoc.report import plots, safe, svg
from traindoc.report.json import clean
from traindoc.report.text import NO_TRAINING

_CSS = """
:root{--fg:#1d1f21;--bg:#fff;--muted:#666;--line:#2b6cb0;--grid:#ccc;--panel:#f5f6f7;
--error:#c0392b;--warning:#b9770e;--info:#2e86c1;color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--fg:#e3e3e3;--bg:#16181a;--muted:#9aa0a6;--line:#7fb3ff;
--grid:#444;--panel:#212427;--error:#ff6b5e;--warning:#f0b429;--info:#6cb6ff}}
body{font:15px/1.5 system-ui,-apple-system,sans-serif;color:var(--fg);background:var(--bg);
max-width:62rem;margin:0 auto;padding:1rem}
h1{font-size:1.35rem;margin:.2rem 0}h2{font-size:1.1rem;margin:.2rem 0 .5rem}
.run,.muted,figcaption{color:var(--muted)}
.finding{border-left:4px solid var(--muted);background:var(--panel);padding:.6rem .9rem;margin:1rem 0;
border-radius:4px}
.finding.error{border-color:var(--error)}.finding.warning{border-color:var(--warning)}
.finding.info{border-color:var(--info)}
.sev{font-size:.8rem;text-transform:uppercase;font-weight:700;margin-right:.4rem}
.error .sev{color:var(--error)}.warning .sev{color:var(--warning)}.info .sev{color:var(--info)}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem .8rem;margin:.5rem 0}
dt{color:var(--muted)}dd{margin:0;overflow-wrap:anywhere}
figure{margin:.6rem 0}.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(19rem,1fr));gap:0 1rem}svg.plot{width:100%;height:auto;display:block;font:11px system-ui,sans-serif}
svg .frame{fill:none;stroke:var(--grid)}svg .tick{fill:var(--muted)}
svg .series{fill:none;stroke:var(--line);stroke-width:1.5;stroke-linejoin:round}
svg circle.series{fill:var(--line)}
svg .trigger{stroke:var(--error);stroke-width:1.5}svg .trigger-label{fill:var(--error)}
svg .threshold{stroke:var(--warning);stroke-width:1.2;stroke-dasharray:6 4}
svg .threshold-label{fill:var(--warning)}svg .nonfinite path{fill:var(--error)}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:.85rem;margin:.4rem 0}
th,td{padding:.15rem .6rem;text-align:right;border-bottom:1px solid var(--grid);white-space:nowrap}
th:first-child,td:first-child{text-align:left}
code,pre{font-family:ui-monospace,monospace;font-size:.85rem}pre{overflow:auto;white-space:pre-wrap}
details{margin:.4rem 0}summary{cursor:pointer;color:var(--muted)}
@media (max-width:40rem){body{padding:.5rem;font-size:14px}.finding{padding:.5rem .6rem}
dl{grid-template-columns:1fr}dt{margin-top:.3rem}
svg.plot{font-size:15px}}
"""
_PARAM_COLUMNS = (("dtype", "dtype"), ("numel", "elements"), ("norm", "|w|"), ("grad", "|grad|"),
                  ("update", "|dw|/|w|"), ("unchanged", "unchanged"), ("moved", "max moved"),
                  ("step", "step"))


def render(report: Report) -> str:
    run = report.run
    unit = "epoch" if run.get("x") == "epoch" else "step"
    name = str(run.get("script") or run.get("source", ""))
    out = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width,initial-scale=1'>",
           "<meta name='color-scheme' content='light dark'>",
           f"<title>traindoc report: {safe.html(name)}</title><style>{_CSS}</style></head><body>",
           f"<header><h1>traindoc report: {safe.html(name)}</h1>",
           f"<p class='run'>{safe.html(_run_line(report, unit))}</p>",
           f"<p class='summary'>{safe.html(_summary(report))}</p></header>"]
    out.append("<section id='findings'>")
    for sev in SEVERITIES:
        for f in (f for f in report.findings if f.severity == sev):
            out.append(_finding(f, report, unit))
    out.append("</section>")
    out.append(_overview(report, unit))
    out.append(_detectors(report))
    out.append("</body></html>\n")
    return "".join(out)


def _run_line(report: Report, unit: str) -> str:
    run = report.run
    bits = [str(run.get("source", "")), f"{run.get('steps', 0)} {unit}s"]
    if run.get("optimizer_steps") is not None:
        bits.append(f"{run['optimizer_steps']} optimizer steps took effect")
    duration = run.get("duration_s")
    if isinstance(duration, (int, float)) and duration > 0:
        bits.append(f"{duration:.1f} s")
        steps = run.get("steps")
        if isinstance(steps, int) and steps > 0 and unit == "step":
            bits.append(f"{steps / duration:.3g} steps/s on average")
    if run.get("status") not in (None, "ok"):
        bits.append(f"status {run['status']}")
    if run.get("exit_code"):
        bits.append(f"exit code {run['exit_code']}")
    return ", ".join(b for b in bits if b)


def _summary(report: Report) -> str:
    if report.run.get("trained") is False:
        return f"No training was observed: the script ended {NO_TRAINING}"
    if not report.findings:
        return "No findings: nothing in this run looks broken to the detectors that ran."
    counts = [(sum(f.severity == s for f in report.findings), s) for s in SEVERITIES]
    return ", ".join(f"{n} {s}{'s' if n > 1 else ''}" for n, s in counts if n)


def _finding(f: Finding, report: Report, unit: str) -> str:
    at = f" ({unit} {f.step})" if f.step is not None else ""
    step = f" data-step='{safe.html(f.step)}'" if f.step is not None else ""
    sev = safe.html(f.severity)
    out = [f"<article class='finding {sev}' id='finding-{safe.html(f.id)}' data-id='{safe.html(f.id)}'{step}>",
           f"<h2><span class='sev'>{sev}</span>{safe.html(f.id)}{safe.html(at)}: {safe.html(f.title)}</h2>",
           f"<p class='evidence'>{safe.html(f.message)}</p>"]
    for p in plots.for_finding(f, report):
        out.append(_figure(report, p.series, p.label, p.trigger, p.threshold, unit))
    rows = plots.param_rows(f, report)
    if rows:
        out.append(_param_table(rows))
    for key, value in f.evidence.items():
        if isinstance(value, dict) and value:
            out.append(_dict_table(key, value))
    out.append("<dl>")
    if f.where:
        out.append(f"<dt>where</dt><dd>{safe.html(', '.join(f.where))}</dd>")
    out.append(f"<dt>cause</dt><dd>{safe.html(f.cause)}</dd><dt>fix</dt><dd>{safe.html(f.fix)}</dd></dl>")
    data = json.dumps(clean(f.evidence), indent=1, default=str)
    out.append(f"<details><summary>evidence as data</summary><pre>{safe.html(data)}</pre></details></article>")
    return "".join(out)


def _figure(report: Report, name: str, label: str, trigger: int | None, threshold: float | None,
            unit: str) -> str:
    curve = report.series[name]
    note = f"{curve.points} points"
    if curve.width > 1:
        note += f", each bucket of {curve.width} {unit}s shown by its lowest and highest value"
    if curve.nonfinite:
        note += f"; non-finite values marked at the top ({len(curve.nonfinite)} bucket(s))"
    plot = svg.plot(curve, label=label, trigger=trigger, threshold=threshold, unit=unit)
    return f"<figure>{plot}<figcaption>{safe.html(label)} ({safe.html(note)})</figcaption></figure>"


def _param_table(rows: Sequence[tuple[str, Mapping[str, object]]]) -> str:
    head = "".join(f"<th>{safe.html(title)}</th>" for _, title in _PARAM_COLUMNS)
    out = [f"<div class='scroll'><table class='params'><tr><th>parameter</th>{head}</tr>"]
    for name, row in rows:
        cells = "".join(f"<td>{safe.html(_cell(row.get(key)))}</td>" for key, _ in _PARAM_COLUMNS)
        out.append(f"<tr><td>{safe.html(name)}</td>{cells}</tr>")
    out.append("</table></div>")
    return "".join(out)


def _dict_table(key: str, value: Mapping[str, object]) -> str:
    rows = "".join(f"<tr><td>{safe.html(str(k))}</td><td>{safe.html(_cell(v))}</td></tr>" for k, v in list(value.items())[:20])
    return f"<div class='scroll'><table class='evidence-table'><tr><th>{safe.html(key)}</th><th></th></tr>{rows}</table></div>"


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _overview(report: Report, unit: str) -> str:
    names = [n for n in plots.OVERVIEW if n in report.series and report.series[n].points]
    out = ["<section id='overview'><h2>Run overview</h2>"]
    if not names:
        out.append("<p class='muted'>This source carried no per-step curve (loss, LR, gradient norm).</p>")
    out.append("<div class='plots'>")
    for name in names:
        out.append(_figure(report, name, plots.label(name), None, None, unit))
    out.append("</div>")
    others = sorted(n for n in report.series if n not in names and report.series[n].points)
    if others:
        out.append(f"<p class='muted'>Other curves in the JSON report: {safe.html(', '.join(others))}.</p>")
    if report.params and not report.findings:
        out.append("<details><summary>parameters</summary>")
        out.append(_param_table(list(report.params.items())[:50]) + "</details>")
    out.append("</section>")
    return "".join(out)


def _detectors(report: Report) -> str:
    out = ["<section id='detectors'><h2>Detectors</h2>"]
    if report.disabled:
        out.append("<p><b>disabled after an internal error:</b></p><ul>")
        out += [f"<li>{safe.html(i)}: {safe.html(e)}</li>" for i, e in report.disabled]
        out.append("</ul>")
    out.append(f"<p><b>ran ({len(report.ran)}):</b> {safe.html(', '.join(report.ran)) or 'none'}</p>")
    if report.not_applicable:
        out.append(f"<details><summary>not applicable ({len(report.not_applicable)})</summary><ul>")
        out += [f"<li>{safe.html(i)}: {safe.html(r)}</li>" for i, r in report.not_applicable]
        out.append("</ul></details>")
    out.append("</section>")
    return "".join(out)
