"""``traindoc report REPORT.json``: show a saved JSON report again, as text, HTML or JSON.

Any report written with ``--json`` (by run, analyze, logs or ckpt) re-renders without the run:
``traindoc report run.json --html run.html``. Imports no torch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from traindoc.errors import UsageError, regular_file, too_deep
from traindoc.report import output


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="REPORT.json", help="a JSON report written with --json")
    output.add_report_options(parser, detectors=False)


def run(args: argparse.Namespace) -> int:
    from traindoc.report import json as json_report

    path = Path(args.report)
    hint = "give a report written with `--json PATH`"
    regular_file(path, hint)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        report = json_report.from_dict(data)
    except RecursionError:
        raise too_deep(path, hint) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc}); {hint}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: {exc}; is this a report written with `--json`?") from None
    return output.emit(report, args)
