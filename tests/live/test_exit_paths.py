"""Every way a run ends is reported, and ends as with plain ``python script.py``: the same exit
status (a signal's death included), the script's own ``sys.excepthook``, signal handlers and
``atexit`` callbacks run, training in a non-daemon thread is in the report, and the report is
written once. Each case runs tests/live/exit_scripts/ending.py bare and under ``traindoc run``;
the script signals itself at a given step, so nothing depends on timing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import ENV

SCRIPT = Path(__file__).resolve().parent / "exit_scripts" / "ending.py"
STEPS, AT = 12, 5  # as in the script

# mode: (exit status of `python ending.py mode`, the report's status, its steps, files left by
# the script's own handlers). A negative status is death by that signal.
CASES: dict[str, tuple[int, str, int, set[str]]] = {
    "normal": (0, "ok", STEPS, set()),
    "raise": (1, "exception", AT, set()),
    "exit3": (3, "exit", AT, set()),
    "sigint": (-signal.SIGINT, "interrupted", AT, set()),
    "sigterm": (-signal.SIGTERM, "terminated", AT, set()),
    "sighup": (-signal.SIGHUP, "hangup", AT, set()),
    "handler-returns": (0, "ok", STEPS, {"handler"}),  # the user's handler returns: training goes on
    "handler-exits": (128 + signal.SIGTERM, "exit", AT, {"handler"}),  # it calls sys.exit(143)
    "handler-chains": (0, "ok", STEPS, {"handler"}),  # it calls the handler it replaced
    "excepthook": (1, "exception", AT, {"excepthook"}),
    "atexit": (0, "ok", STEPS, {"atexit"}),
    "atexit-sigint": (-signal.SIGINT, "interrupted", AT, {"atexit"}),
    "thread": (0, "ok", STEPS, set()),
    "thread-sigterm": (-signal.SIGTERM, "terminated", AT, set()),  # while Python waits for it
    "executor": (0, "ok", STEPS, set()),
    "fork-sigterm": (0, "ok", STEPS, set()),  # a forked child's SIGTERM is the child's end only
}


def start(args: list[str], marks: Path, env: dict[str, str] | None = None,
          setup: Callable[[], Any] | None = None) -> subprocess.Popen[str]:
    """The script as a terminal starts it: SIGINT and SIGHUP at their default actions whatever
    the suite was launched under (a shell's background job ignores SIGINT, `nohup` SIGHUP, and
    the children inherit that: Ctrl-C then never reaches the bare script), then ``setup``."""
    def as_from_a_terminal() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        if setup is not None:
            setup()

    marks.mkdir()
    return subprocess.Popen([sys.executable, *args, str(marks)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env or ENV, preexec_fn=as_from_a_terminal)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=180)
    return proc.returncode, err


def marks_of(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


@pytest.mark.parametrize("mode", list(CASES))
def test_the_run_ends_as_without_traindoc_and_is_reported(mode: str, tmp_path: Path) -> None:
    code, status, steps, marks = CASES[mode]
    report = tmp_path / "report.json"
    bare = start([str(SCRIPT), mode], tmp_path / "bare")  # both at once: half the wall time
    under = start(["-m", "traindoc", "run", "--json", str(report), str(SCRIPT), mode], tmp_path / "under")
    (bare_code, bare_err), (under_code, under_err) = finish(bare), finish(under)
    assert bare_code == code, bare_err[-2000:]
    assert under_code == code, under_err[-3000:]
    assert marks_of(tmp_path / "bare") == marks_of(tmp_path / "under") == marks
    run = json.loads(report.read_text())["run"]
    assert (run["status"], run["steps"], run["trained"]) == (status, steps, True)
    expected_code = 128 - code if code < 0 else code  # what a shell shows for a signal's death
    assert run.get("exit_code", 0) == expected_code
    assert under_err.count("traindoc report") == 1  # written once
    if mode == "excepthook":  # the script's hook prints the exception; Python's does not
        assert "user hook saw ValueError" in bare_err and "user hook saw ValueError" in under_err
        assert "Traceback" not in bare_err and "Traceback" not in under_err


def test_an_ignored_signal_stays_ignored(tmp_path: Path) -> None:
    """`nohup` (SIGHUP ignored before the script starts): the run goes on, as without traindoc."""
    def ignore_sighup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    report = tmp_path / "report.json"
    bare = start([str(SCRIPT), "sighup"], tmp_path / "bare", setup=ignore_sighup)
    under = start(["-m", "traindoc", "run", "--json", str(report), str(SCRIPT), "sighup"],
                  tmp_path / "under", setup=ignore_sighup)
    (bare_code, _), (under_code, err) = finish(bare), finish(under)
    assert bare_code == under_code == 0, err[-2000:]
    run = json.loads(report.read_text())["run"]
    assert (run["status"], run["steps"]) == ("ok", STEPS)


def test_watch_reports_on_sigterm(tmp_path: Path) -> None:
    """`traindoc.watch()` in the script: the report on stderr, then death by SIGTERM."""
    base = {k: v for k, v in ENV.items() if not k.startswith("TRAINDOC")}
    code, err = finish(start([str(SCRIPT), "watch-sigterm"], tmp_path / "watch", env=base))
    assert code == -signal.SIGTERM, err[-2000:]
    assert err.count("traindoc report") == 1 and "status terminated" in err


@pytest.mark.parametrize("mode", ["sigterm", "sigint", "thread", "excepthook"])
def test_autostart_reports_every_ending(mode: str, tmp_path: Path) -> None:
    """`TRAINDOC=1 python ending.py mode` ends as `python ending.py mode` and reports."""
    code, status, steps, marks = CASES[mode]
    report = tmp_path / "report.json"
    base = {k: v for k, v in ENV.items() if not k.startswith("TRAINDOC")}
    bare = start([str(SCRIPT), mode], tmp_path / "bare", env=base)
    auto = start([str(SCRIPT), mode], tmp_path / "auto", env={**base, "TRAINDOC": "1", "TRAINDOC_JSON": str(report)})
    (bare_code, bare_err), (auto_code, auto_err) = finish(bare), finish(auto)
    assert bare_code == auto_code == code, auto_err[-2000:]
    assert marks_of(tmp_path / "bare") == marks_of(tmp_path / "auto") == marks
    assert auto_err.count("traindoc report") == 1
    run = json.loads(report.read_text())["run"]
    assert (run["status"], run["steps"]) == (status, steps)


def test_torchrun_ranks_ended_by_sigterm_give_one_report(tmp_path: Path) -> None:
    """Each rank reports its end on SIGTERM; rank 0 writes the job's one report, then each dies
    by the signal (torchrun then fails the job, as without traindoc)."""
    report = tmp_path / "report.json"
    job = Path(__file__).resolve().parent / "exit_scripts" / "ranks_sigterm.py"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    ran = subprocess.run([*torchrun, "-m", "traindoc", "run", "--json", str(report), str(job)],
                         capture_output=True, text=True, env=ENV, timeout=240)
    assert ran.returncode == 1 and "exitcode: -15" in ran.stderr, ran.stderr[-3000:]  # as bare
    assert ran.stderr.count("traindoc report") == 1
    run = json.loads(report.read_text())["run"]
    assert (run["status"], run["steps"], run["exit_code"]) == ("terminated", AT, 143)
    assert run["rank_status"] == ["terminated", "terminated"] and run["rank_steps"] == [AT, AT]
