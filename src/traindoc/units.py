"""The units of a family package (detectors, lint rules), found on disk instead of listed by hand.

One unit per public module, named after its failure id: the module's own classes that carry a
string ``id``. Modules are read in sorted order, so the order is fixed and every run, report and
test sees the same one. No plugin system: only the package's own modules are read. A directory
listing, not ``pkgutil``, which ``lint`` would pay to import at every start.
"""

from __future__ import annotations

import importlib
import os
from typing import Iterable


def scan(package: str, path: Iterable[str]) -> list[type]:
    """The units of ``package`` (whose ``__path__`` is ``path``), by module name."""
    names = sorted({f[:-3] for folder in path for f in os.listdir(folder)
                    if f.endswith(".py") and not f.startswith("_")})
    out: list[type] = []
    for name in names:
        module = importlib.import_module(f"{package}.{name}")
        found = [v for v in vars(module).values()
                 if isinstance(v, type) and v.__module__ == module.__name__ and isinstance(getattr(v, "id", None), str)]
        if not found:  # our own invariant: a module of a family holds its unit
            raise ImportError(f"{module.__name__} holds no unit (a class with an id)")
        out += found
    return out
