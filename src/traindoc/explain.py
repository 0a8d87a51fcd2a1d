"""``traindoc explain ID``: the catalog entry of a failure id, with lint examples when any."""

from __future__ import annotations

import argparse
import sys

from traindoc import catalog
from traindoc.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", nargs="?", help="a failure id, e.g. update-underflow (omit to list all)")


def text(id_: str) -> str:
    try:
        entry = catalog.get(id_)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    head = f"{entry.id} [{entry.severity}]: {entry.title}\nsources: {', '.join(entry.sources)}"
    if entry.seed and entry.seed not in ("—", "-"):
        head += f"   seed: {entry.seed}"
    parts = [head, entry.body]
    try:
        from traindoc.lint.rules import rule_docs
    except ImportError:
        rule_docs = None  # type: ignore[assignment]
    if rule_docs is not None:
        docs = rule_docs(id_)
        if docs:
            parts.append(docs)
    return "\n\n".join(parts) + "\n"


def run(args: argparse.Namespace) -> int:
    if not args.id:
        for entry in catalog.entries().values():
            sys.stdout.write(f"{entry.id:32} {entry.severity:8} {entry.title}\n")
        return 0
    sys.stdout.write(text(args.id))
    return 0
