"""One registry, derived from the code: where every piece of each failure id lives.

For each id: its catalog page, its detector module, its lint rule(s) (found by the ``id`` each
rule declares, not by file name), the live probes that produce the signals its detector reads,
the log and checkpoint readers that produce them, the examples that must fire and those that
must stay quiet (the detector's ``examples``, the zoo and demo scripts' ``traindoc-expect``
lines, a lint rule's snippets) and the test files that name it. Each fact is read from the unit
that owns it; the one hand-kept table, ``TESTED_ELSEWHERE``, names the units that are neither
detectors nor lint rules (the guard, the fleet, the preflight probes). ``traindoc explain ID --where`` prints it;
tests/test_registry.py checks every path exists and every file is named after its id.

Which faces of each id are built (``faces.json``, the README's coverage table) is computed here
too, from the same evidence the tests check. This is a face, like ``explain``: it may import
the catalog, detectors, lint rules, sources and the live probes, each lazily.

Paths are relative to the repository root when this runs from a checkout (``zoo/`` beside
``src/``); an installed package has no zoo and no tests, and shows package paths only.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import re
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Mapping

from traindoc import catalog
from traindoc.cases import Case, demo_cases, read

PACKAGE = Path(__file__).resolve().parent
# Units outside the detectors and lint rules, with the test file that proves them both ways.
TESTED_ELSEWHERE: dict[str, dict[str, str]] = {
    # The rollback guard is policy, not a detector, so it has no examples; its tests prove it.
    "guard-rollback": {"live": "tests/live_metrics/test_guard.py"},
    # A fleet's runs compared with each other: no detector sees more than one run.
    "sibling-outlier": {"logs": "tests/fleet/test_folders.py"},
    # The preflight probes: each fails on a case made for it and passes on healthy ones.
    **{id_: {"preflight": "tests/preflight/test_preflight.py"} for id_ in (
        "bad-initial-loss", "no-gradient", "nondeterministic-eval", "resume-mismatch", "cannot-overfit-batch",
        "lr-out-of-range", "nonfinite", "vanishing-gradients")},
}
# A cited path: a repository folder, or a tests/ subfolder as detector examples cite them.
CITED = re.compile(r"(?<![\w./-])((?:zoo|tests|docs|benchmarks|tools|src|demo_scripts|golden|fixtures|ckpt|"
                   r"live\w*)/[\w./-]*\w)")
_TESTS_FOLDERS = ("golden", "fixtures", "ckpt", "live")  # detector examples name these under tests/


def root() -> Path | None:
    """The repository root of a checkout, None for an installed package."""
    top = PACKAGE.parents[1]
    return top if (top / "zoo").is_dir() and (top / "tests").is_dir() else None


def rel(path: Path) -> str:
    """``path`` as shown: relative to the checkout, else to the package's parent."""
    base = root() or PACKAGE.parent
    try:
        return path.resolve().relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def resolve(cited: str) -> Path:
    """The file a cited path names: ``demo_scripts/x.py`` is in the package, a detector
    example's ``golden/...`` or ``fixtures/...`` is under tests/, others are from the root."""
    top = root() or PACKAGE.parents[1]
    head = cited.split("/", 1)[0]
    if head == "demo_scripts":
        return PACKAGE / cited
    if head.startswith(_TESTS_FOLDERS):
        return top / "tests" / cited
    return top / cited


def cited_paths(text: str) -> list[str]:
    """The repository paths ``text`` cites (``zoo/x.py``, ``tests/...``, ``docs/...``)."""
    return list(dict.fromkeys(m.rstrip(".") for m in CITED.findall(text)))


@dataclass(frozen=True)
class Where:
    """The pieces of one failure id, as paths. Empty where the id has no such piece."""

    id: str
    page: str
    detector: str
    lint_rules: tuple[str, ...]
    probes: tuple[str, ...]
    readers: tuple[str, ...]
    fires: tuple[str, ...]  # examples on which it must fire
    quiet: tuple[str, ...]  # healthy examples on which it must stay quiet
    tests: tuple[str, ...]

    def paths(self) -> list[str]:
        """Every path this entry cites, once."""
        out: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "id":
                out += [value] if isinstance(value, str) else list(value)
        return list(dict.fromkeys(p for p in out if p))


# --- what produces each signal ---------------------------------------------------------------


def probes_feeding(wanted: Iterable[str]) -> tuple[str, ...]:
    """The modules of the live probes that produce any of the signals ``wanted`` (a detector's
    ``needs`` and ``uses``), as the live face chooses the probes it installs: each probe class
    declares its ``signals``; a script's own metric (``val_acc``) is the metric probes'
    ``metrics``. Empty without torch."""
    try:
        from traindoc.live.probes import PROBES, probe_signals
    except ImportError:
        return ()
    signals = set(wanted) | probe_signals(wanted)
    found = [_module_file(cls.__module__) for cls in PROBES if signals & set(cls.signals)]
    return tuple(dict.fromkeys(rel(Path(f)) for f in found))


@lru_cache(maxsize=1)
def reader_signals() -> dict[str, tuple[str, ...]]:
    """{reader module path: the signals it produces}: each log reader (a public module of
    ``sources.logs`` with a ``read`` function) yields the signals a column maps to; the
    checkpoint reader yields what ``sources.ckpt.produce`` emits."""
    from traindoc.sources.ckpt import produce
    from traindoc.sources.logs import mapping

    logs = PACKAGE / "sources" / "logs"
    out: dict[str, tuple[str, ...]] = {}
    for info in pkgutil.iter_modules([str(logs)]):
        file = logs / f"{info.name}.py"
        if not info.name.startswith("_") and _defines(file, "read"):
            out[rel(file)] = mapping.CANONICAL
    out[rel(PACKAGE / "sources" / "ckpt" / "read.py")] = produce.SIGNALS
    out[rel(Path(produce.__file__))] = produce.SIGNALS
    return out


def _defines(file: Path, name: str) -> bool:
    tree = ast.parse(file.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


def _module_file(module: str) -> str:
    import importlib

    return str(importlib.import_module(module).__file__)


def _applies(needs: Iterable[str], uses: Iterable[str], have: Iterable[str]) -> bool:
    """The engine's rule: every need is there; with no needs, any one of the uses."""
    needs, have = set(needs), set(have)
    return needs <= have if needs else bool(set(uses) & have)


# --- the registry ----------------------------------------------------------------------------


@lru_cache(maxsize=1)
def cases() -> list[Case]:
    """The zoo's cases (from a checkout) and the demo scripts, by name."""
    top = root()
    return sorted((read(top / "zoo") if top else []) + demo_cases(), key=lambda c: c.name)


@lru_cache(maxsize=1)
def ids() -> list[str]:
    """Every failure id: the catalog's pages and every id a unit or a case names."""
    from traindoc import detectors
    from traindoc.lint.rules import RULES

    named = set(catalog.entries()) | {c.id for c in detectors.DETECTORS} | {r.id for r in RULES}
    named |= {id_ for case in cases() for id_ in case.expect} | set(TESTED_ELSEWHERE)
    return sorted(named)


def where(id_: str) -> Where:
    """The pieces of ``id_``; KeyError with a "Did you mean" hint when unknown."""
    from traindoc import detectors
    from traindoc.lint.rules import RULES

    if id_ not in ids():
        catalog.get(id_)  # raises with the hint
        raise KeyError(f"unknown failure id {id_!r}.")
    det = detectors.by_id().get(id_)
    fires: list[str] = []
    quiet: list[str] = []
    probes: tuple[str, ...] = ()
    readers: list[str] = []
    if det is not None:
        uses = det.uses
        probes = probes_feeding({*det.needs, *uses})
        readers = [p for p, s in reader_signals().items() if _applies(det.needs, uses, s)]
        for ex in det.examples:
            (quiet if ex.fires_at is None else fires).append(rel(resolve(ex.source)))
    # A rule reports its own id; one that finds the cause of another failure says so.
    rules = [r for r in RULES if r.id == id_ or id_ in getattr(r, "cause_of", ())]
    for rule in (r for r in rules if r.id == id_):
        path = rel(Path(_module_file(rule.__module__)))
        fires += [path] if rule.invalid else []
        quiet += [path] if rule.valid else []
    fires += [rel(c.path) for c in cases() if id_ in c.expect]
    for path in TESTED_ELSEWHERE.get(id_, {}).values():
        fires.append(path)
        quiet.append(path)
    page = PACKAGE / "catalog" / f"{id_}.md"
    mention = re.compile(rf"(?<![\w-]){re.escape(id_)}(?![\w-])")
    return Where(
        id=id_,
        page=rel(page) if page.exists() else "",
        detector=rel(Path(_module_file(det.__module__))) if det is not None else "",
        lint_rules=tuple(rel(Path(_module_file(r.__module__))) for r in rules),
        probes=probes,
        readers=tuple(readers),
        fires=tuple(dict.fromkeys(fires)),
        quiet=tuple(dict.fromkeys(quiet)),
        tests=tuple(p for p, text in _test_texts().items() if mention.search(text)),
    )


@lru_cache(maxsize=1)
def _test_texts() -> dict[str, str]:
    top = root()
    if top is None:
        return {}
    return {rel(p): p.read_text(encoding="utf-8") for p in sorted((top / "tests").rglob("test_*.py"))}


def text(id_: str) -> str:
    """``traindoc explain ID --where``: one line per piece, paths only."""
    w = where(id_)
    rows = [("catalog page", [w.page]), ("detector", [w.detector]), ("lint rules", list(w.lint_rules)),
            ("live probes", list(w.probes)), ("readers", list(w.readers)), ("fires on", list(w.fires)),
            ("quiet on", list(w.quiet)), ("tests", list(w.tests))]
    out = [f"{id_}: where its pieces are"]
    for label, paths in rows:
        paths = [p for p in paths if p]
        if label == "lint rules":  # a rule file is named after the id it reports
            paths = [p if _stem_id(p) == id_ else f"{p} (reports {_stem_id(p)}, the cause)" for p in paths]
        out.append(f"  {label + ':':14}{paths[0] if paths else '(none)'}")
        out += [f"  {'':14}{p}" for p in paths[1:]]
    if root() is None:
        out.append("  (an installed package: the zoo and tests are in the repository)")
    return "\n".join(out) + "\n"


def _stem_id(path: str) -> str:
    return Path(path).stem.replace("_", "-")


# --- which faces are built (faces.json) ------------------------------------------------------


def _example_face(source: str) -> str | None:
    """The face a detector example proves, from where its stream or log comes from."""
    top = source.split("/")[0]
    if top.startswith("live"):
        return "live"
    if source.startswith(("fixtures/logs", "logs/")):
        return "logs"
    if top == "ckpt":
        return "ckpt"
    return None  # a zoo example: the zoo case's own expectation line counts for live


def compute(all_cases: Iterable[Case]) -> dict[str, list[str]]:
    """{id: built faces} for every catalog id, from the zoo cases (the repository's ``zoo/``
    plus the demo scripts), the detectors' examples and the lint rules. A face counts as built
    only when a test proves it on a case that must fire: a zoo case or a live-recorded stream
    (live), a log fixture (logs), a checkpoint stream (ckpt), a lint rule (lint), or a unit in
    ``TESTED_ELSEWHERE``."""
    from traindoc import detectors
    from traindoc.lint.rules import RULES

    have: dict[str, set[str]] = {id_: set() for id_ in catalog.entries()}

    def add(id_: str, face: str) -> None:
        catalog.get(id_)  # evidence for an id the catalog lacks is a bug: KeyError
        have[id_].add(face)

    for case in all_cases:
        for id_ in case.expect:
            add(id_, "live")
    for cls in detectors.DETECTORS:
        for ex in cls.examples:
            face = _example_face(ex.source) if ex.fires_at is not None else None
            if face:
                add(cls.id, face)
    for rule in RULES:
        add(rule.id, "lint")
    for id_, faces in TESTED_ELSEWHERE.items():
        for face in faces:
            add(id_, face)
    return {id_: [f for f in catalog.FACES if f in got] for id_, got in sorted(have.items())}


def dumps(built: Mapping[str, list[str]]) -> str:
    """``faces.json``: one id per line, so a change reads as a one-line diff."""
    rows = [f"  {json.dumps(id_)}: {json.dumps(faces)}" for id_, faces in built.items()]
    return "{\n" + ",\n".join(rows) + "\n}\n"


def coverage_table() -> str:
    """The README's coverage table, from the catalog and its committed ``faces.json``."""
    faces = catalog.FACES
    rows = ["| id | severity | " + " | ".join(faces) + " |", "|---|---|" + "---|" * len(faces)]
    working = 0
    for entry in catalog.entries().values():
        state = catalog.faces(entry.id)
        working += any(state.values())
        cells = ["✓" if state.get(f) else ("·" if f in state else "") for f in faces]
        rows.append(f"| `{entry.id}` | {entry.severity} | " + " | ".join(cells) + " |")
    rows.append(f"\n{working} of {len(catalog.entries())} failure ids have at least one working face. "
                "✓ built and tested; · planned, not built yet.")
    return "\n".join(rows)
