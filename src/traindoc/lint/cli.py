"""``traindoc lint PATH...``: the command-line face of the lint rules.

The main CLI calls ``add_arguments`` on its ``lint`` subparser and ``run`` with the parsed
arguments. Exit codes: 0 clean, 1 findings, 2 usage error or files that could not be linted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from traindoc import catalog
from traindoc.lint import render
from traindoc.lint.config import ConfigError
from traindoc.lint.engine import UsageError, lint_ids, lint_paths, summary
from traindoc.report import safe

FORMATS = ("text", "json", "sarif", "github")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="Python files or directories (searched for *.py)")
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    parser.add_argument(
        "--select", metavar="IDS", action="append", default=None,
        help="only these failure ids (comma-separated; replaces [tool.traindoc] select)",
    )
    parser.add_argument(
        "--ignore", metavar="IDS", action="append", default=None,
        help="never these failure ids (comma-separated; adds to [tool.traindoc] ignore)",
    )
    parser.add_argument("--no-config", action="store_true", help="do not read [tool.traindoc] from pyproject.toml")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")


def run(args: argparse.Namespace) -> int:
    select = _split(args.select)
    ignore = _split(args.ignore) or []
    try:
        if select is not None:
            unknown = [i for i in select if i not in lint_ids()]
            _check_known(unknown)
        result = lint_paths(args.paths, select=select, ignore=ignore, use_config=not args.no_config)
    except (UsageError, ConfigError) as e:
        print(safe.terminal(f"Error: {e}"), file=sys.stderr)
        return 2
    for error in result.errors:
        print(error.render(), file=sys.stderr)
    if args.format == "text":
        report = render.text(result)
    elif args.format == "json":
        report = render.json_report(result)
    elif args.format == "sarif":
        chosen = [i for i in lint_ids() if (select is None or i in select) and i not in ignore]
        report = render.sarif(result, chosen)
    else:
        report = render.github(result)
    if args.output:
        try:
            Path(args.output).write_text(report, encoding="utf-8")
        except OSError as e:
            print(safe.terminal(f"Error: cannot write {args.output}: {e}"), file=sys.stderr)
            return 2
        print(summary(result), file=sys.stderr)
    else:
        try:
            sys.stdout.write(report)
            sys.stdout.flush()
        except BrokenPipeError:  # `traindoc lint . | head`: the reader left, that is fine
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if args.exit_zero and result.exit_code == 1:
        return 0
    return result.exit_code


def _split(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _check_known(unknown: list[str]) -> None:
    """--select must name ids that lint can report; other catalog ids get a clear message."""
    for id_ in unknown:
        try:
            catalog.get(id_)
        except KeyError as e:  # a typo: the message carries "Did you mean ...?"
            raise UsageError(e.args[0]) from None
        raise UsageError(f"'{id_}' has no lint rule; lint reports: {', '.join(lint_ids())}")
