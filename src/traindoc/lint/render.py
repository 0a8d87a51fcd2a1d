"""Render a lint result as text, JSON, SARIF 2.1.0 or GitHub workflow annotations.

All four read the same ``LintFinding`` data; none of them decides anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from traindoc import __version__, catalog
from traindoc.lint.engine import LintResult, display_path, summary
from traindoc.report import safe

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def text(result: LintResult) -> str:
    """``path:line:col: id message`` plus an indented ``fix:`` line per finding, then a summary.
    Paths and messages (which quote the source) are escaped for the terminal."""
    out = []
    for f in result.findings:
        out.append(safe.terminal(f"{f.path}:{f.line}:{f.col}: {f.finding.id} {f.finding.message}"))
        out.append(safe.terminal(f"    fix: {f.finding.fix}"))
    out.append(summary(result))
    return "\n".join(out) + "\n"


def json_report(result: LintResult) -> str:
    """A list of findings with the run report's fields plus ``path``, ``line``, ``col``."""
    return json.dumps(safe.json_safe([f.to_dict() for f in result.findings]), indent=2) + "\n"


def github(result: LintResult, base: Path | None = None) -> str:
    """``::error file=...,line=...,col=...,title=...::message`` workflow commands (``warning``
    for warning and info findings)."""
    base = base or repo_root()
    out = []
    for f in result.findings:
        kind = "error" if f.finding.severity == "error" else "warning"
        title = f"traindoc {f.finding.id}: {f.finding.title}"
        props = ",".join(
            [
                f"file={_prop(display_path(Path(f.path), base))}",
                f"line={f.line}",
                f"col={f.col}",
                f"title={_prop(title)}",
            ]
        )
        message = f"{f.finding.message}\nFix: {f.finding.fix}"
        out.append(f"::{kind} {props}::{_data(message)}")
    for e in result.errors:
        props = f"file={_prop(display_path(Path(e.path), base))}" + (f",line={e.line}" if e.line else "")
        out.append(f"::error {props},title=traindoc::{_data(e.message)}")
    return "\n".join(out) + ("\n" if out else "")


def sarif(result: LintResult, rule_ids: list[str], base: Path | None = None) -> str:
    """A SARIF 2.1.0 log: one run, one rule per catalog id, repo-relative artifact URIs."""
    base = base or repo_root()
    rules = []
    index = {}
    for i, id_ in enumerate(rule_ids):
        entry = catalog.get(id_)
        index[id_] = i
        detects = entry.section("What it detects")
        fix = entry.section("What to try")
        rules.append(
            {
                "id": id_,
                "name": "".join(part.capitalize() for part in id_.split("-")),
                "shortDescription": {"text": entry.title},
                "fullDescription": {"text": detects or entry.title},
                "help": {
                    "text": f"{detects}\n\nWhat to try:\n{fix}".strip(),
                    "markdown": f"{entry.body}".strip(),
                },
                "defaultConfiguration": {"level": SARIF_LEVEL.get(entry.severity, "warning")},
                "properties": {"tags": ["traindoc", "training"], "precision": "high"},
            }
        )
    results = []
    for f in result.findings:
        results.append(
            {
                "ruleId": f.finding.id,
                "ruleIndex": index.get(f.finding.id, -1),
                "level": SARIF_LEVEL.get(f.finding.severity, "warning"),
                "message": {"text": f"{f.finding.message}. Fix: {f.finding.fix}"},
                "locations": [_location(f.path, base, f.line, f.col)],
            }
        )
    notifications = [
        {
            "level": "error",
            "message": {"text": e.message},
            "locations": [_location(e.path, base, e.line or 1, 1)],
        }
        for e in result.errors
    ]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "traindoc",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": rules,
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": base.resolve().as_uri() + "/"}},
                "invocations": [
                    {
                        "executionSuccessful": not any(e.kind == "internal" for e in result.errors),
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "results": results,
            }
        ],
    }
    return json.dumps(safe.json_safe(log), indent=2) + "\n"  # no lone surrogate from a file name


def repo_root(start: Path | None = None) -> Path:
    """The git work tree holding ``start`` (found by its ``.git``, no git command), else cwd."""
    here = (start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        if (folder / ".git").exists():
            return folder
    return here


def _location(path: str, base: Path, line: int, col: int) -> dict[str, object]:
    full = Path(path).resolve()
    try:
        rel = full.relative_to(base.resolve()).as_posix()
        # a name that is not UTF-8 is percent-encoded as its own bytes (%FF), as as_uri does
        artifact: dict[str, str] = {"uri": quote(rel, errors="surrogateescape"), "uriBaseId": "%SRCROOT%"}
    except ValueError:
        artifact = {"uri": full.as_uri()}
    return {
        "physicalLocation": {
            "artifactLocation": artifact,
            "region": {"startLine": line, "startColumn": col},
        }
    }


def _data(text: str) -> str:
    text = safe.terminal(text, keep="\r\n")  # a workflow command is read from the job's log
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")
