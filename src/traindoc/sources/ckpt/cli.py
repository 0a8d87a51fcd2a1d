"""``traindoc ckpt inspect PATH`` and ``traindoc ckpt diff OLD NEW``.

Imports nothing heavy at module level: the main CLI imports this at startup, torch is loaded
only when a command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Callable, TypeVar

from traindoc.errors import UsageError
from traindoc.report import output

LR_ID = "lr-overridden-by-checkpoint"


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 3e-4, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def _shared(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trust", action="store_true",
                   help="allow arbitrary unpickling (only for checkpoints from a source you trust)")
    p.add_argument("--expect-lr", type=_positive_float, metavar="LR",
                   help="the LR you configure; report if a resume would restore a different one")
    p.add_argument("--top", type=_positive_int, default=10, metavar="N", help="rows per table (default 10)")
    output.add_report_options(p)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="ckpt_command", metavar="SUBCOMMAND", parser_class=type(parser))
    sub.required = True
    help_i = "what a checkpoint holds (dtypes, sizes, norms, LRs, training state) and what is wrong with it"
    p = sub.add_parser("inspect", help=help_i, description=help_i)
    p.add_argument("path", help="a .pt/.pth/.bin/.ckpt/.safetensors file or a Hugging Face checkpoint folder")
    _shared(p)
    help_d = "what changed between two checkpoints of one model (frozen, tiny or underflowing updates)"
    d = sub.add_parser("diff", help=help_d, description=help_d)
    d.add_argument("old", help="the earlier checkpoint")
    d.add_argument("new", help="the later checkpoint")
    _shared(d)


def run(args: argparse.Namespace) -> int:
    from traindoc import config
    from traindoc.analyze import analyze
    from traindoc.sources.ckpt import produce, summary

    settings = config.load()
    select, ignore = output.detector_choice(args, settings)
    if args.expect_lr is not None:
        overrides = {**settings.detectors.get(LR_ID, {}), "expected_lr": args.expect_lr}
        settings = dataclasses.replace(settings, detectors={**settings.detectors, LR_ID: overrides})
    if args.ckpt_command == "inspect":
        events, found = _guard(lambda: produce.inspect(args.path, trust=args.trust), args.path)
        summary.render_inspect(found, top=args.top)
        block = found.to_json(args.top)
    else:
        events, diffed = _guard(lambda: produce.diff(args.old, args.new, trust=args.trust),
                                f"{args.old} or {args.new}")
        summary.render_diff(diffed, top=args.top)
        block = diffed.to_json(args.top)
    report = analyze(events, select=select, ignore=ignore, settings=settings)
    report.run["checkpoint"] = block
    return output.emit(report, args, settings)


T = TypeVar("T")


def _guard(work: Callable[[], T], what: str) -> T:
    """Run a reader; any failure on untrusted input is one Error line, never a traceback."""
    try:
        return work()
    except (UsageError, KeyboardInterrupt):
        raise
    except MemoryError:
        raise UsageError(f"{what}: ran out of memory reading it") from None
    except Exception as exc:  # noqa: BLE001 - a malformed checkpoint can fail anywhere in torch
        detail = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        raise UsageError(
            f"{what}: cannot read this checkpoint ({type(exc).__name__}{': ' + detail if detail else ''}); "
            "it may be truncated, corrupt or of a layout traindoc does not know"
        ) from None
