"""The fleet view: many runs' reports at once (``traindoc logs runs/``).

Terminal: one line per run (name, steps, worst finding, its step), worst first, then which
failure ids hit how many runs. JSON: every run's full report (the single-run schema) with its
name, id and source, written run by run so a fleet of thousands never sits in memory. HTML: an
index page linking to one section per run, each the single-run HTML report's body.

Renderers take plain rows and a way to read each run's report back; they know no source.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, TextIO

from traindoc.engine import Report
from traindoc.findings import Finding, severity_rank
from traindoc.report import safe
from traindoc.version import __version__

FLEET_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Row:
    """One run of the fleet as the view shows it."""

    name: str
    id: str
    source: str
    steps: int
    x: str  # "step" or "epoch"
    error: str | None  # why it could not be read
    findings: tuple[Finding, ...]

    def worst(self) -> Finding | None:
        return min(self.findings, key=lambda f: (severity_rank(f.severity), f.step if f.step is not None else -1),
                   default=None)

    def rank(self) -> tuple[int, int, str]:
        """Sort key, worst first: errors, warnings, info, unreadable runs, healthy ones."""
        w = self.worst()
        if w is not None:
            return (severity_rank(w.severity), -len(self.findings), self.name)
        return (3 if self.error is not None else 4, 0, self.name)


def worst_first(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=Row.rank)


def failure_ids(rows: Iterable[Row]) -> dict[str, int]:
    """{id: number of runs with a finding of that id}, most runs first."""
    counts: dict[str, int] = {}
    for r in rows:
        for id_ in dict.fromkeys(f.id for f in r.findings):
            counts[id_] = counts.get(id_, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def summary(rows: list[Row]) -> dict[str, object]:
    sick = sum(1 for r in rows if r.findings)
    bad = sum(1 for r in rows if r.error is not None)
    return {"runs": len(rows), "with_findings": sick, "unreadable": bad,
            "healthy": len(rows) - sick - bad, "failure_ids": failure_ids(rows)}


def plain(text: str) -> str:
    """A user's string (a run name, a path) on one terminal line: control characters escaped."""
    return safe.terminal(text)


def lines(rows: list[Row], title: str) -> list[str]:
    """The fleet view: a header, one line per run worst first, the failure ids' counts."""
    s = summary(rows)
    out = [f"traindoc fleet: {plain(title)}: {s['runs']} runs, {s['healthy']} without findings, "
           f"{s['with_findings']} with findings, {s['unreadable']} unreadable"]
    ordered = worst_first(rows)
    width = min(48, max([len("run")] + [len(plain(r.name)) for r in ordered]))
    out.append(f"  {'run':<{width}}  {'steps':>7}  {'worst finding':<34} step")
    for r in ordered:
        name = plain(r.name)
        name = name if len(name) <= width else "..." + name[-(width - 3):]
        w = r.worst()
        if r.error is not None:
            out.append(f"  {name:<{width}}  {'-':>7}  cannot be read: {plain(r.error)}")
        elif w is None:
            out.append(f"  {name:<{width}}  {r.steps:>7}  -")
        else:
            more = f" (+{len(r.findings) - 1})" if len(r.findings) > 1 else ""
            at = "-" if w.step is None else str(w.step)
            out.append(f"  {name:<{width}}  {r.steps:>7}  {(w.severity + ' ' + w.id + more):<34} {at}")
    ids = s["failure_ids"]
    assert isinstance(ids, dict)
    if ids:
        out.append("failure ids: " + ", ".join(f"{i} {n} run{'s' if n > 1 else ''}" for i, n in ids.items()))
    else:
        out.append("failure ids: none")
    return out


def write_json(rows: list[Row], report_text: Callable[[int], str | None], out: TextIO,
               source: str) -> None:
    """The fleet's JSON: ``{"traindoc", "fleet_schema_version", "fleet": {summary},
    "runs": [{"name", "id", "source", "steps", "error", "report"}]}`` in the order the runs were
    found; ``report`` is the single-run JSON report (``report_text(i)``, already serialized by
    the worker that diagnosed the run; null for a run that could not be read)."""
    head = {"traindoc": __version__, "fleet_schema_version": FLEET_SCHEMA_VERSION,
            "fleet": safe.json_safe({"source": source, **summary(rows)})}
    out.write(json.dumps(head, indent=1)[:-2] + ',\n "runs": [\n')
    for i, r in enumerate(rows):
        entry = json.dumps(safe.json_safe({"name": r.name, "id": r.id, "source": r.source,
                                           "steps": r.steps, "error": r.error}))
        out.write(("," if i else "") + entry[:-1] + ', "report": ' + (report_text(i) or "null") + "}\n")
    out.write(" ]\n}\n")


def html(rows: list[Row], report_of: Callable[[int], Report | None], title: str) -> Iterator[str]:
    """The HTML fleet report in pieces: the index (worst first), then each run's section."""
    from traindoc.report import html as single

    order = sorted(range(len(rows)), key=lambda i: rows[i].rank())
    s = summary(rows)
    head = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width,initial-scale=1'>"
            "<meta name='color-scheme' content='light dark'>"
            f"<title>traindoc fleet: {safe.html(title)}</title>")
    index = [f"<header><h1>traindoc fleet: {safe.html(title)}</h1><p class='summary'>{s['runs']} runs, "
             f"{s['healthy']} without findings, {s['with_findings']} with findings, {s['unreadable']} "
             "unreadable</p></header><section id='fleet'><div class='scroll'><table class='fleet'>"
             "<tr><th>run</th><th>steps</th><th>worst finding</th><th>step</th></tr>"]
    for i in order:
        r = rows[i]
        w = r.worst()
        link = f"<a href='#run-{i}'>{safe.html(r.name)}</a>"
        if r.error is not None:
            index.append(f"<tr><td>{safe.html(r.name)}</td><td>-</td><td colspan='2'>cannot be read: "
                         f"{safe.html(r.error)}</td></tr>")
            continue
        worst = "-" if w is None else f"<span class='{w.severity}'>{w.severity}</span> {safe.html(w.id)}"
        at = "-" if w is None or w.step is None else str(w.step)
        index.append(f"<tr><td>{link}</td><td>{r.steps}</td><td>{worst}</td><td>{at}</td></tr>")
    index.append("</table></div>")
    ids = s["failure_ids"]
    assert isinstance(ids, dict)
    if ids:
        index.append("<p><b>failure ids:</b> " + ", ".join(
            f"{safe.html(i)} {n} run{'s' if n > 1 else ''}" for i, n in ids.items()) + "</p>")
    index.append("</section>")
    extra = ("table.fleet .error{color:var(--error)}table.fleet .warning{color:var(--warning)}"
             "table.fleet .info{color:var(--info)}section.run{border-top:2px solid var(--grid);margin-top:2rem}")
    started = False
    for i in order:  # one run's report in memory at a time
        report = report_of(i)
        if report is None:
            continue
        page = single.render(report)
        if not started:  # the single-run report's style serves every section
            found = re.search(r"<style>(.*?)</style>", page, re.S)
            yield f"{head}<style>{found.group(1) if found else ''}{extra}</style></head><body>"
            yield from index
            started = True
        body = page.split("<body>", 1)[-1].rsplit("</body>", 1)[0]
        yield (f"<section class='run' id='run-{i}'><p><a href='#fleet'>back to the index</a></p>"
               f"{body}</section>")
    if not started:
        yield f"{head}<style>{extra}</style></head><body>"
        yield from index
    yield "</body></html>\n"
