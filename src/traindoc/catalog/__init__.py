"""The failure catalog: one Markdown file per failure id, the contract between every face.

Each ``<id>.md`` starts with a small header (``severity``, ``title``, ``sources``, ``seed``) and
then the same sections: What it detects, Why it matters, Common causes, What to try, False
positives. It is the one place a failure is described: ``traindoc explain ID`` prints it;
findings take their severity, title and (unless the run supplies a more specific one) their
cause and fix from it. ``sources`` lists the faces the catalog plans for the id; which of them
are built comes from ``faces.json``, generated from the tests' evidence (see ``traindoc.registry``).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Mapping, Sequence

from traindoc.findings import SEVERITIES, EvidenceValue, Finding, Severity

FACES = ("live", "logs", "ckpt", "lint", "preflight")
SECTIONS = ("What it detects", "Why it matters", "Common causes", "What to try", "False positives")


@dataclass(frozen=True)
class Entry:
    id: str
    severity: Severity
    title: str
    sources: tuple[str, ...]  # the faces the catalog plans for this id, built or not
    seed: str
    body: str  # the Markdown sections

    def section(self, name: str) -> str:
        """The text under ``## name``, '' when the page has no such section."""
        out: list[str] = []
        inside = False
        for line in self.body.splitlines():
            if line.startswith("## "):
                inside = line[3:].strip() == name
            elif inside:
                out.append(line)
        return "\n".join(out).strip()

    @property
    def cause(self) -> str:
        """A finding's default cause: the lead paragraph of Common causes, else its bullets."""
        return _summary(self.section("Common causes"))

    @property
    def fix(self) -> str:
        """A finding's default fix: the lead paragraph of What to try, else its bullets."""
        return _summary(self.section("What to try"))


def _summary(text: str) -> str:
    """One paragraph from a section: the text before its first bullet when there is some (a
    page states its summary there), else every bullet joined into sentences."""
    lead, bullets = [], []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("- "):
            bullets.append(line[2:])
        elif line and bullets:
            bullets[-1] += " " + line  # a bullet continued on the next line (code, mostly)
        elif line:
            lead.append(line)
    if lead:
        return " ".join(lead)
    return " ".join(b if b.endswith((".", ":", ")", "`")) else b + "." for b in bullets)


def _parse(id_: str, text: str) -> Entry:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise ValueError(f"catalog entry {id_}: missing header")
    end = lines.index("---", 1)
    header = dict(line.split(":", 1) for line in lines[1:end])
    header = {k.strip(): v.strip() for k, v in header.items()}
    severity = header["severity"]
    if severity not in SEVERITIES:
        raise ValueError(f"catalog entry {id_}: bad severity {severity!r}")
    sources = tuple(s.strip() for s in header.get("sources", "").split(",") if s.strip())
    unknown = set(sources) - set(FACES)
    if unknown:
        raise ValueError(f"catalog entry {id_}: unknown sources {sorted(unknown)}; faces are {FACES}")
    return Entry(
        id=id_,
        severity=severity,
        title=header["title"],
        sources=sources,
        seed=header.get("seed", ""),
        body="\n".join(lines[end + 1 :]).strip(),
    )


@lru_cache(maxsize=1)
def entries() -> dict[str, Entry]:
    """All catalog entries by id."""
    out: dict[str, Entry] = {}
    for item in resources.files(__name__).iterdir():
        name = item.name
        if name.endswith(".md"):
            id_ = name[:-3]
            out[id_] = _parse(id_, item.read_text(encoding="utf-8"))
    return dict(sorted(out.items()))


def get(id_: str) -> Entry:
    """The entry for ``id_``; KeyError with a "Did you mean" hint when unknown."""
    table = entries()
    if id_ in table:
        return table[id_]
    close = difflib.get_close_matches(id_, list(table), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise KeyError(f"unknown failure id {id_!r}.{hint}")


@lru_cache(maxsize=1)
def built() -> dict[str, tuple[str, ...]]:
    """The built faces of every id, as committed in ``faces.json`` (``python tools/coverage.py
    --write`` regenerates it from the tests' evidence; a test fails when it is stale)."""
    text = resources.files(__name__).joinpath("faces.json").read_text(encoding="utf-8")
    return {id_: tuple(faces) for id_, faces in json.loads(text).items()}


def faces(id_: str) -> dict[str, bool]:
    """The faces of ``id_`` in the order of ``FACES``: True for a face that is built (a test
    proves it fires on a case that must fire), False for one the catalog plans (``sources``)
    that is not built yet. Faces neither built nor planned are left out."""
    entry = get(id_)
    have = set(built().get(id_, ()))
    return {face: face in have for face in FACES if face in have or face in entry.sources}


def finding(
    id_: str,
    *,
    message: str,
    cause: str | None = None,
    fix: str | None = None,
    step: int | None = None,
    evidence: Mapping[str, EvidenceValue] | None = None,
    where: Sequence[str] = (),
) -> Finding:
    """A finding whose severity and title come from the catalog entry of ``id_``, and its cause
    and fix too unless the caller knows better: a cause or fix that names the run's own objects
    (the optimizer, a parameter, file:line) or depends on what was measured is passed in; the
    general one lives once, on the catalog page (``Entry.cause``, ``Entry.fix``). It lives here,
    not in ``findings``, so that findings stay plain data that know no catalog."""
    entry = get(id_)
    return Finding(
        id=id_, severity=entry.severity, title=entry.title, message=message,
        cause=entry.cause if cause is None else cause, fix=entry.fix if fix is None else fix,
        step=step, evidence=dict(evidence or {}), where=tuple(where),
    )
