"""``traindoc explain ID``: the catalog page of a failure id, the faces that catch it today and
those not built yet, then the lint rule's examples when there is one. ``--where`` prints instead
the paths of the id's pieces (``traindoc.registry``)."""

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
    parser.add_argument("--where", action="store_true",
                        help="print where the id's pieces are: catalog page, detector, lint rules, live probes, "
                             "log and checkpoint readers, examples that fire and stay quiet, tests")


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
    except ImportError:  # a face not built into this install
        pass
    else:
        docs = rule_docs(id_)
        if docs:
            parts.append(docs)
    return "\n\n".join(parts) + "\n"


def where(id_: str) -> str:
    from traindoc import registry  # reads the detectors, lint rules and probes: only when asked

    try:
        return registry.text(id_)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None


def run(args: argparse.Namespace) -> int:
    if args.where:
        if not args.id:
            raise UsageError("--where needs a failure id, e.g. traindoc explain update-underflow --where")
        sys.stdout.write(where(args.id))
        return 0
    if not args.id:
        for entry in catalog.entries().values():
            sys.stdout.write(f"{entry.id:32} {entry.severity:8} {entry.title}\n")
        return 0
    sys.stdout.write(text(args.id))
    return 0
