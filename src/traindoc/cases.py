"""Case scripts: tiny CPU training scripts that really fail (and healthy twins).

Each script is plain PyTorch, written the way people write training code, and never imports
traindoc. Its docstring ends with a ``traindoc-expect:`` line listing the failure ids that
``traindoc run`` must report as warning or error (``id@N``: first at step N); an empty list
means a healthy run that must stay quiet. The package ships only the three that ``traindoc
demo`` runs (``demo_scripts/``); the whole failure zoo lives in the repository's ``zoo/`` folder,
read by the end-to-end tests and the docs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    expect: dict[str, int | None]  # id -> first step (None: any step)
    summary: str

    @property
    def healthy(self) -> bool:
        return not self.expect


def parse(path: Path) -> Case:
    text = path.read_text(encoding="utf-8")
    match = re.search(r"^traindoc-expect:(.*)$", text, re.M)
    if match is None:
        raise ValueError(f"{path.name}: no traindoc-expect line")
    expect: dict[str, int | None] = {}
    for token in match.group(1).split():
        id_, _, step = token.partition("@")
        expect[id_] = int(step) if step else None
    doc = re.search(r'"""(.*?)\n', text)
    return Case(path.stem, path, expect, doc.group(1).strip() if doc else "")


def read(folder: Path) -> list[Case]:
    """The cases in ``folder`` (every ``*.py`` not starting with ``_``), by name."""
    return [parse(p) for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]


def demo_cases() -> list[Case]:
    """The cases shipped with the package, for ``traindoc demo``."""
    return read(Path(str(resources.files("traindoc") / "demo_scripts")))
