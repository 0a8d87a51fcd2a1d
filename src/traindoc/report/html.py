"""A self-contained HTML report (no scripts, no external assets): one file to attach to a bug."""

from __future__ import annotations

import json
from html import escape

from traindoc.engine import Report
from traindoc.findings import SEVERITIES

_CSS = """body{font:14px/1.45 system-ui,sans-serif;max-width:60rem;margin:2rem auto;color:#222}
h1{font-size:1.3rem}.f{border-left:4px solid #999;padding:.3rem .8rem;margin:1rem 0}
.error{border-color:#c0392b}.warning{border-color:#d68910}.info{border-color:#2e86c1}
.k{color:#666;display:inline-block;width:6rem}code,pre{background:#f4f4f4}
pre{padding:.4rem;overflow:auto}"""


def render(report: Report) -> str:
    run = report.run
    out = [
        "<!doctype html><html><head><meta charset='utf-8'><title>traindoc report</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>traindoc report: {escape(str(run.get('script') or run.get('source', '')))}</h1>",
        f"<p>{escape(str(run.get('steps', 0)))} optimizer steps</p>",
    ]
    if not report.findings:
        out.append("<p>No findings.</p>")
    for sev in SEVERITIES:
        for f in (f for f in report.findings if f.severity == sev):
            at = f" (step {f.step})" if f.step is not None else ""
            out.append(f"<div class='f {sev}'><h2>{escape(f.id)}{at}: {escape(f.title)}</h2>")
            out.append(f"<p><span class='k'>evidence</span>{escape(f.message)}</p>")
            if f.where:
                out.append(f"<p><span class='k'>where</span>{escape(', '.join(f.where))}</p>")
            out.append(f"<p><span class='k'>cause</span>{escape(f.cause)}</p>")
            out.append(f"<p><span class='k'>fix</span>{escape(f.fix)}</p>")
            out.append(f"<pre>{escape(json.dumps(f.evidence, indent=1, default=str))}</pre></div>")
    out.append(f"<p><b>ran:</b> {escape(', '.join(report.ran))}</p>")
    if report.not_applicable:
        out.append("<p><b>not applicable:</b></p><ul>")
        out += [f"<li>{escape(i)}: {escape(r)}</li>" for i, r in report.not_applicable]
        out.append("</ul>")
    out.append("</body></html>\n")
    return "".join(out)
