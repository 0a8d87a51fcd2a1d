"""``traindoc explain ID``: the catalog page of a failure id, the faces that catch it today and
those not built yet, then the lint rule's examples when there is one."""

from __future__ import annotations

import argparse
import sys

from traindoc import catalog
from traindoc.errors import UsageError

FACES_HEADING = "## Where traindoc catches it"
BUILT, NOT_BUILT = "catches it today", "not built yet"
# How a user reaches each face.
HOW = {
    "live": "`traindoc run`, `traindoc.watch()`",
    "logs": "`traindoc logs`",
    "ckpt": "`traindoc ckpt`",
    "lint": "`traindoc lint`",
    "preflight": "short probes before the real run",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", nargs="?", help="a failure id, e.g. update-underflow (omit to list all)")


def faces_section(id_: str) -> str:
    """Markdown: one line per face of ``id_``, built or planned (``catalog.faces``)."""
    lines = [FACES_HEADING, ""]
    for face, built in catalog.faces(id_).items():
        lines.append(f"- {face} ({HOW[face]}): {BUILT if built else NOT_BUILT}")
    if len(lines) == 2:
        lines.append(f"No face is built or planned for {id_} yet.")
    return "\n".join(lines)


def text(id_: str) -> str:
    try:
        entry = catalog.get(id_)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    head = f"{entry.id} [{entry.severity}]: {entry.title}"
    if entry.seed and entry.seed not in ("—", "-"):
        head += f"\nseed: {entry.seed}"
    parts = [head, entry.body, faces_section(id_)]
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
