"""``traindoc analyze RUN.jsonl``: replay a recorded event stream through the same detectors."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterable

from traindoc import config, detectors, record
from traindoc.engine import Engine, Report
from traindoc.errors import UsageError
from traindoc.events import Event
from traindoc.report import output


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stream", help="a .jsonl event stream written by `traindoc run --record`")
    output.add_report_options(parser)


def analyze(events: Iterable[Event], *, select: Iterable[str] | None = None,
            ignore: Iterable[str] = (), settings: config.Settings | None = None) -> Report:
    """Feed ``events`` through fresh detectors and return the report."""
    settings = settings or config.Settings()
    dets = detectors.build(select=select, ignore=ignore, config=settings.detectors)
    engine = Engine(dets, ignore=ignore)
    for event in events:
        engine.feed(event)
    return engine.finish()


def run(args: argparse.Namespace) -> int:
    path = Path(args.stream)
    if not path.is_file():
        raise UsageError(f"{path}: no such file; pass the .jsonl written by `traindoc run --record`")
    settings = config.load()
    select, ignore = output.detector_choice(args, settings)
    output.check_output_path(args.json, "--json")
    try:
        events = list(record.read(path))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{exc}; is this a stream written by `traindoc run --record`?") from None
    if not events:
        raise UsageError(f"{path} is empty; record a run with `traindoc run --record {path} train.py`")
    report = analyze(events, select=select, ignore=ignore, settings=settings)
    return output.emit(report, args, settings)
