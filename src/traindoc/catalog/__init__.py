"""The failure catalog: one Markdown file per failure id, the contract between every face.

Each ``<id>.md`` starts with a small header (``severity``, ``title``, ``sources``, ``seed``) and
then the same sections: What it detects, Why it matters, Common causes, What to try, False
positives. ``traindoc explain ID`` prints it; findings take their default severity and title
from it; the README's coverage table is checked against it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from traindoc.findings import SEVERITIES, Severity


@dataclass(frozen=True)
class Entry:
    id: str
    severity: Severity
    title: str
    sources: tuple[str, ...]
    seed: str
    body: str  # the Markdown sections


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
    return Entry(
        id=id_,
        severity=severity,  # type: ignore[arg-type]
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
