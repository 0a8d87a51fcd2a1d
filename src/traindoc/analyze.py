"""``traindoc analyze RUN.jsonl | DIR``: replay recorded event streams through the same detectors.

A multi-rank run recorded with ``--record DIR`` leaves one stream per rank (``rank0.jsonl``,
``rank1.jsonl`` ...). They are merged as the live run merged them on rank 0: rank 0's stream
with the other ranks' cross-rank events (fingerprints, step times, losses) goes through one
set of detectors; each other rank's stream goes through its own, and its findings join the report
marked with the ranks that found them (``merge_ranks``, also what the live rank 0 does).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Iterable, Mapping

from traindoc import config, detectors, record
from traindoc.engine import Engine, Report
from traindoc.errors import UsageError, regular_file, too_deep
from traindoc.events import Event, RankEnd, RankLoss, RankParams, RankTime, RunEnd
from traindoc.findings import Finding
from traindoc.report import output

# The events one rank sends the others (what rank 0's detectors compare across ranks).
CROSS_RANK = (RankParams, RankTime, RankLoss)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stream", nargs="+",
                        help="a .jsonl event stream written by `traindoc run --record`, several (one "
                             "per rank), or the folder a multi-rank run recorded into")
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


def analyze_ranks(streams: Mapping[int, list[Event]], *, select: Iterable[str] | None = None,
                  ignore: Iterable[str] = (), settings: config.Settings | None = None) -> Report:
    """One report for a multi-rank run from each rank's stream (``{rank: events}``)."""
    first = min(streams)
    others: list[Event] = [e for r, events in sorted(streams.items()) if r != first for e in events
              if isinstance(e, CROSS_RANK)]
    report = analyze(_interleave(streams[first], others), select=select, ignore=ignore, settings=settings)
    found: dict[int, list[Finding]] = {first: list(report.findings)}
    ends: dict[int, RankEnd] = {}
    size = max(len(streams), *(_world(events) for events in streams.values()))
    for r, events in sorted(streams.items()):
        if r != first:
            found[r] = list(analyze(events, select=select, ignore=ignore, settings=settings).findings)
        ends[r] = _end(r, size, events)
    return merge_ranks(report, ends, found, size)


def merge_ranks(report: Report, ends: Mapping[int, RankEnd], found: Mapping[int, list[Finding]],
                size: int, unit: str = "rank") -> Report:
    """Rank 0's report with every rank's findings: a finding carries the ranks that found it in
    ``evidence["ranks"]`` (a cross-rank finding already names the ranks it concerns); one found
    on other ranks only is added from the lowest of them, its message saying so. The run block
    gets the world size, the backend and each rank's steps and status."""
    by_id: dict[str, list[int]] = {}
    first: dict[str, Finding] = {}
    for r in sorted(found):
        for f in found[r]:
            by_id.setdefault(f.id, []).append(r)
            first.setdefault(f.id, f)
    merged: list[Finding] = []
    for id_, f in first.items():
        ranks = by_id[id_]
        if "ranks" in f.evidence:
            merged.append(f)
            continue
        evidence = {**f.evidence, "ranks": ranks}
        if min(found) not in ranks:
            units = unit + ("es" if unit.endswith("s") else "s")  # ranks, processes
            only = f"on {unit} {ranks[0]}" if len(ranks) == 1 else f"on {units} {', '.join(map(str, ranks))}"
            f = dataclasses.replace(f, message=f"{only} (not {unit} {min(found)}): {f.message}")
        merged.append(dataclasses.replace(f, evidence=evidence))
    report.findings[:] = merged
    backends = {e.backend for e in ends.values() if e.backend}
    missing = [r for r in range(size) if r not in ends]
    report.run.update(
        world_size=size, ranks=size, backend=", ".join(sorted(backends)),
        rank_steps=[ends[r].steps if r in ends else None for r in range(size)],
        rank_status=[ends[r].status if r in ends else "unknown" for r in range(size)],
    )
    if missing:
        report.disabled.append(("ranks", f"rank(s) {', '.join(map(str, missing))} did not report how they "
                                          "ended (crashed, killed, or still running at the timeout): "
                                          "their findings and last steps are missing"))
    return report


def _interleave(base: list[Event], others: list[Event]) -> list[Event]:
    """``base`` with ``others`` inserted before ``base``'s RunEnd, in step order among themselves."""
    others = sorted(others, key=lambda e: getattr(e, "step", 0))
    end = next((i for i, e in enumerate(base) if isinstance(e, RunEnd)), len(base))
    return base[:end] + others + base[end:]


def _world(events: list[Event]) -> int:
    return max([e.world_size for e in events if isinstance(e, (RankParams, RankTime, RankLoss, RankEnd))] or [1])


def _end(rank: int, size: int, events: list[Event]) -> RankEnd:
    run_end = next((e for e in events if isinstance(e, RunEnd)), None)
    ended = next((e for e in events if isinstance(e, RankEnd)), None)
    if ended is not None:
        return ended
    return RankEnd(rank=rank, world_size=size, steps=run_end.steps if run_end else 0,
                   status=run_end.status if run_end else "unknown")


def _streams(paths: list[str]) -> dict[int, list[Event]]:
    """{rank: events} from the paths given (files, or one folder of ``rank<N>.jsonl``)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.jsonl"))
            if not found:
                raise UsageError(f"{p}: no .jsonl streams in this folder; record a run with "
                                 f"`traindoc run --record {p} train.py`")
            files += found
        else:
            regular_file(p, "pass the .jsonl written by `traindoc run --record`")
            files.append(p)
    streams: dict[int, list[Event]] = {}
    for path in files:
        regular_file(path, "pass the .jsonl written by `traindoc run --record`")  # a FIFO would block
        try:
            events = list(record.read(path))
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"{exc}; is this a stream written by `traindoc run --record`?") from None
        except RecursionError:
            raise too_deep(path, "is this a stream written by `traindoc run --record`?") from None
        except OSError as exc:
            raise UsageError(f"{path}: cannot be read ({exc.strerror or exc}); pass the .jsonl written by "
                             "`traindoc run --record`") from None
        if not events:
            raise UsageError(f"{path} is empty; record a run with `traindoc run --record {path} train.py`")
        rank = record.rank_of(path, events)
        if rank in streams:
            raise UsageError(f"{path}: a second stream of rank {rank}; pass one stream per rank")
        streams[rank] = events
    return streams


def run(args: argparse.Namespace) -> int:
    settings = config.load()
    select, ignore = output.detector_choice(args, settings)
    streams = _streams(list(args.stream))
    if len(streams) == 1:
        report = analyze(next(iter(streams.values())), select=select, ignore=ignore, settings=settings)
    else:
        report = analyze_ranks(streams, select=select, ignore=ignore, settings=settings)
    return output.emit(report, args, settings)


__all__ = ["CROSS_RANK", "add_arguments", "analyze", "analyze_ranks", "merge_ranks", "run"]
