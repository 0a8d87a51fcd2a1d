"""``traindoc preflight train.py [args]``: short active probes of a script before the real run.

Prints one verdict per probe (pass / fail / n/a and why), then the report of the baseline launch
(the live probes' findings, as ``traindoc run`` shows them) with the probes' findings added.
``--json`` writes ``traindoc run``'s JSON report plus a ``preflight`` block.

It is a gate, run before the long job (``traindoc preflight train.py && sbatch train.sh``): a
probe that fails exits 3 without any ``--fail-on``; ``--fail-on never`` turns that off.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from traindoc import config
from traindoc.errors import UsageError
from traindoc.preflight.verdict import FAIL, PROBES, Verdict
from traindoc.report import output

if TYPE_CHECKING:
    from traindoc.engine import Report

EXIT_CODES = """exit codes:
  0  every probe passed or was not applicable (and no finding reached --fail-on)
  1  the script raised in the baseline launch (the probes then say n/a and why)
  2  bad usage or input (one line on stderr, no traceback)
  3  a probe failed, or a finding is at or above --fail-on; with --fail-on never, never 3

  traindoc preflight train.py && sbatch train.sh    # the long job starts only if every probe passed"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", metavar="PROBE,PROBE", default="",
                        help=f"run only these probes ({', '.join(PROBES)})")
    parser.add_argument("--budget", type=float, default=300.0, metavar="SECONDS",
                        help="time for all the script's launches together (default 300)")
    parser.add_argument("--resume-args", default="", metavar="'ARGS'",
                        help="arguments added to the relaunch that must resume from the checkpoint "
                             "(default: none, for scripts that resume by themselves)")
    output.add_report_options(parser, gate_help=(
        "exit 3 when a probe fails (the default: preflight is a gate), and also when a finding "
        "of this severity or worse exists; 'never' always exits 0 unless the script raised"))
    parser.epilog = EXIT_CODES
    parser.add_argument("target", nargs=argparse.REMAINDER, help="script.py and its own arguments")


def run(args: argparse.Namespace) -> int:
    if not args.target:
        raise UsageError("nothing to run: give a script (`traindoc preflight train.py ...`)")
    script = Path(args.target[0])
    if not script.is_file():
        raise UsageError(f"{script}: no such file; give the training script's path")
    only = _only(args.only)
    if not args.budget > 0:
        raise UsageError(f"--budget must be > 0 seconds, got {args.budget}")
    settings = config.load(script.resolve().parent)
    select, ignore = output.detector_choice(args, settings)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UsageError("torch is not installed: `traindoc preflight` runs PyTorch training; install torch") from None
    from traindoc.live.watch import Watch
    from traindoc.preflight import core

    plan = core.Plan(script.resolve(), list(args.target[1:]), only=only, budget=args.budget,
                     resume_args=shlex.split(args.resume_args))
    outcome = core.run(plan, lambda: Watch(level="standard", select=select, ignore=ignore, settings=settings,
                                           script=str(script), argv=plan.argv))
    _print_verdicts(outcome.verdicts, outcome.seconds, outcome.removed, outcome.restored)
    report = outcome.report
    live_ids = {f.id for f in report.findings}
    report.findings.extend(f for v in outcome.verdicts for f in v.findings
                           if f.id not in live_ids and f.id not in ignore)
    block = {"probes": [v.to_dict() for v in outcome.verdicts], "seconds": round(outcome.seconds, 3),
             "removed_files": outcome.removed, "restored_files": outcome.restored}
    json_path = args.json
    never = (args.fail_on or settings.fail_on) == "never"
    fail = output.emit(report, argparse.Namespace(**{**vars(args), "json": None, "fail_on": None if never
                                                     else args.fail_on}),
                       dataclasses.replace(settings, fail_on=None) if never else settings)
    if json_path:
        _write_json(report, block, json_path)
    crashed = outcome.baseline is not None and outcome.baseline.status == "error"
    if crashed:
        return 1
    failed = [v.probe for v in outcome.verdicts if v.status == FAIL]
    if failed and not never:
        sys.stderr.write(f"traindoc preflight: {len(failed)} probe(s) failed ({', '.join(failed)}): exit "
                         f"{output.EXIT_FAIL_ON}, so a following `&& sbatch ...` does not start "
                         "(--fail-on never to go on anyway)\n")
        return output.EXIT_FAIL_ON
    return 0 if never else fail


def _only(text: str) -> tuple[str, ...]:
    chosen = tuple(p.strip() for p in text.split(",") if p.strip())
    for p in chosen:
        if p not in PROBES:
            raise UsageError(f"--only: unknown probe {p!r}; the probes are {', '.join(PROBES)}")
    return chosen or PROBES


def _print_verdicts(verdicts: list[Verdict], seconds: float, removed: list[str], restored: list[str]) -> None:
    out = sys.stderr
    out.write(f"traindoc preflight: {len(verdicts)} probe(s) in {seconds:.1f}s\n")
    width = max((len(v.probe) for v in verdicts), default=0)
    for v in verdicts:
        out.write(f"  {v.probe:<{width}}  {v.status:<4}  {v.summary}\n")
        for f in v.findings:
            out.write(f"  {'':<{width}}        {f.id}: {f.message}\n")
            out.write(f"  {'':<{width}}        fix: {f.fix}\n")
    for done, paths in (("removed the new file(s)", removed), ("put back the overwritten file(s)", restored)):
        if paths:
            more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
            out.write(f"traindoc preflight: the script saved outside its working folder; {done} "
                      f"{', '.join(paths[:3])}{more}\n")
    out.flush()


def _write_json(report: Report, block: dict[str, object], path: str) -> None:
    from traindoc.report import json as json_report

    data = json_report.to_dict(report)
    data["preflight"] = block
    text = json.dumps(data, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.traindoc-tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)

