"""The failure zoo of the repository (``zoo/``) plus the demo cases the package ships."""

from __future__ import annotations

from pathlib import Path

from traindoc.cases import Case, demo_cases, read

ZOO = Path(__file__).resolve().parents[1] / "zoo"


def cases() -> list[Case]:
    return sorted(read(ZOO) + demo_cases(), key=lambda c: c.name)


def case(name: str) -> Case:
    for c in cases():
        if c.name == name:
            return c
    raise KeyError(name)


__all__ = ["Case", "ZOO", "case", "cases"]
