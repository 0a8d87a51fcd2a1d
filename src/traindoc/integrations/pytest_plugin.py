"""``pytest --traindoc``: a training smoke test fails when traindoc finds something in it.

    pytest --traindoc                      # watch every test; fail on errors
    pytest --traindoc --traindoc-fail-on warning

    @pytest.mark.traindoc(fail_on="warning")   # this test only, with or without --traindoc
    def test_tiny_training_run(): ...

Each watched test runs inside ``traindoc.watch()`` (the same probes, detectors and report as
``traindoc run``); a test whose training has findings at or above ``fail_on`` fails with their
one-line summaries, and the full report is attached to the test's output. A test that trains
nothing is quiet. Marker keywords: ``fail_on``, ``level``, ``select``, ``ignore``.

Registered through the ``pytest11`` entry point; importing it imports neither torch nor the
live face (that happens in a watched test only).
"""

from __future__ import annotations

import io
from typing import Any, Generator

import pytest

from traindoc import config
from traindoc.integrations._options import LEVEL_NAMES, Options, at_or_above

_KEYWORDS = ("fail_on", "level", "select", "ignore")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("traindoc", "traindoc: fail training smoke tests on silent failures")
    group.addoption("--traindoc", action="store_true",
                    help="watch every test's training with traindoc; fail tests with findings")
    group.addoption("--traindoc-fail-on", choices=("error", "warning", "info"), default="error",
                    help="the severity that fails a test (default error)")
    group.addoption("--traindoc-level", choices=LEVEL_NAMES, default="standard",
                    help="how much to measure (default standard)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "traindoc(fail_on='error', level='standard', select=None, ignore=()): watch this "
        "test's training with traindoc and fail it on findings at or above fail_on")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A wrong marker stops the session before any test runs, as a usage error."""
    for item in items:
        if item.get_closest_marker("traindoc") is not None:
            _options(item)


def _options(item: pytest.Item) -> Options | None:
    marker = item.get_closest_marker("traindoc")
    if marker is None and not item.config.getoption("traindoc"):
        return None
    given: dict[str, Any] = {"fail_on": item.config.getoption("traindoc_fail_on"),
                             "level": item.config.getoption("traindoc_level")}
    if marker is not None:
        unknown = sorted(set(marker.kwargs) - set(_KEYWORDS))
        if unknown or marker.args:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.traindoc takes keywords "
                                    f"{', '.join(_KEYWORDS)}; got {', '.join(unknown) or 'positional arguments'}")
        given.update(marker.kwargs)
    try:
        return Options(**given)
    except ValueError as exc:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.traindoc: {exc}") from None


# An old-style wrapper: pytest 7 with an older pluggy loads it too (this plugin is loaded in
# every pytest run of an environment where traindoc is installed).
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    options = _options(item)
    if options is None or _watched():  # not asked for, or watched already (`traindoc run pytest`)
        yield
        return
    from traindoc.live.watch import Watch

    settings = config.load(item.config.rootpath)
    select = tuple(options.select) if options.select is not None else settings.select
    doc = Watch(level=options.level, select=select,
                ignore=tuple(options.ignore) + tuple(settings.ignore), settings=settings,
                announce=False, script=item.nodeid, argv=[])
    doc.__enter__()
    outcome = yield
    report = doc.close("ok" if outcome.excinfo is None else "exception")
    if report.findings:
        from traindoc.report import text

        out = io.StringIO()
        text.render(report, out, width=100)
        item.add_report_section("call", "traindoc", out.getvalue())
    fail_on = options.fail_on or "info"  # a marker's fail_on=None: every finding fails the test
    failing = at_or_above(report.findings, fail_on)
    if failing and outcome.excinfo is None:
        from traindoc.report.text import live_line

        lines = "\n".join(live_line(f) for f in failing)
        failed = pytest.fail.Exception(
            f"traindoc found {len(failing)} finding(s) at or above {fail_on}:\n{lines}", pytrace=False)
        outcome.force_exception(failed)


def _watched() -> bool:
    from traindoc.live.watch import active

    return active() is not None
