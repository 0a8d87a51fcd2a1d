"""The lint rules: one class per module, named after the failure id it reports, found on disk
(``units.scan``) in module-name order.

Each rule carries ``invalid`` snippets (must fire, at the given lines) and ``valid``
near-misses (must stay quiet); one parametrized test runs every example.
"""

from __future__ import annotations

from typing import cast

from traindoc import units
from traindoc.lint.rules._common import Rule, snippet

RULES: tuple[type[Rule], ...] = tuple(cast("list[type[Rule]]", units.scan(__name__, __path__)))


def by_id() -> dict[str, type[Rule]]:
    return {cls.id: cls for cls in RULES}


def rule_docs(id_: str) -> str | None:
    """Markdown for ``traindoc explain ID``: the lint rule's examples, which are also its tests.
    What the rule looks for is on the catalog page, the one place a failure is described; the
    class docstring is for whoever changes the rule. None when no lint rule reports ``id_``."""
    cls = by_id().get(id_)
    if cls is None:
        return None
    out = [f"## Lint rule `{id_}`", "", "Its examples, which are also its tests.", "", "### Fires on", ""]
    for example in cls.invalid:
        lines = ", ".join(str(n) for n in example.lines)
        out += [f"Fires at line {lines}:", "", "```python", snippet(example.code).rstrip(), "```", ""]
    out += ["### Stays quiet on", ""]
    for code in cls.valid:
        out += ["```python", snippet(code).rstrip(), "```", ""]
    out.append(f"Silence one line with `# traindoc: ignore[{id_}]`.")
    return "\n".join(out)
