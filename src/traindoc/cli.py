"""The command line: ``traindoc run|analyze|logs|ckpt|lint|explain|demo``.

Each face lives in its own module and exposes ``add_arguments(parser)`` and ``run(args) -> int``;
this file only wires them. A user mistake raises UsageError: one ``Error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn, Sequence

from traindoc.version import __version__
from traindoc.errors import UsageError
from traindoc.report.output import EXIT_CODES, check_outputs
from traindoc.report.safe import terminal

# name -> (module, one-line help). Modules must import fast (no torch at import time).
FACES: dict[str, tuple[str, str]] = {
    "run": ("traindoc.live.runner", "run a training script under observation (zero code changes)"),
    "analyze": ("traindoc.analyze", "replay a recorded event stream (--record) through the detectors"),
    "logs": ("traindoc.sources.fleet.cli", "diagnose a finished run from its logs (CSV, TensorBoard, trainer_state.json, JSONL), or a folder or tracker of runs"),
    "ckpt": ("traindoc.sources.ckpt.cli", "inspect one checkpoint or diff two"),
    "lint": ("traindoc.lint.cli", "find training mistakes in source code, without running it"),
    "report": ("traindoc.report.cli", "show a saved JSON report again: as text, --html or --json"),
    "explain": ("traindoc.explain", "print the catalog entry of a failure id, or --where its code, examples and tests are"),
    "demo": ("traindoc.demo", "run three zoo cases and show the diagnosis"),
    "preflight": ("traindoc.preflight.cli", "probe a training script in minutes before the long run (initial loss, gradients, overfit, eval, resume, LR)"),
}


class _Parser(argparse.ArgumentParser):
    """argparse, but errors in our voice: ``Error: ...`` plus a hint, exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"Error: {terminal(message)}\nTry '{self.prog} --help'.\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="traindoc", description="A training doctor for PyTorch.", epilog=EXIT_CODES,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"traindoc {__version__}")
    sub = parser.add_subparsers(dest="face", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_) in FACES.items():
        try:
            mod = importlib.import_module(module)
        except ImportError:  # a face not built into this install
            continue
        p = sub.add_parser(name, help=help_, description=help_, epilog=EXIT_CODES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


# Options whose value is a command line of the script's own: "--resume-args --init_from=resume"
# would read as two options (argparse takes a value that starts with "-" for an option)
_COMMAND_LINE_OPTIONS = ("--resume-args",)


def _option_values(argv: list[str]) -> list[str]:
    """``--resume-args VALUE`` as ``--resume-args=VALUE``, for the options above, before the
    script's own arguments (the first ``*.py``) begin."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.endswith(".py"):
            return out + argv[i:]
        if arg in _COMMAND_LINE_OPTIONS and i + 1 < len(argv):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_option_values(list(sys.argv[1:] if argv is None else argv)))
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        check_outputs(args)  # a report that cannot be written is refused now, not after the run
        return int(args._run(args))
    except UsageError as exc:
        sys.stderr.write(f"Error: {terminal(str(exc))}\n")  # messages echo user paths and names
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
