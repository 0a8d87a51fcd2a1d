"""A Python interpreter with torch already imported that runs commands in forked children.

The zoo runs every case twice (under ``traindoc run`` and bare), and starting an interpreter
and importing torch is ~1.6 s of each run here: a third of a small case. This server pays it
once per test worker. Each request is run in a child forked from the warm interpreter, as
``python -m traindoc ARGS`` or ``python SCRIPT ARGS`` would run it (``runpy``, ``sys.argv``,
``__main__``), in its own session, with its output in files and the exit status it ends with
(``sys.exit``, an uncaught exception, a signal). The child is what a fresh interpreter would
be, less the interpreter's start: nothing ran in the server but the imports named on its
command line (the bare runs' server imports nothing of traindoc: they must stay bare).

Protocol: one JSON line per request on stdin (``argv``: ``["-m", "traindoc", ...]`` or
``[script, ...]``; ``cwd``; ``out``, ``err``: file paths), one JSON line per reply on stdout
(``pid`` once started, then ``returncode``). The client kills the child's session on a timeout.
"""

from __future__ import annotations

import json
import os
import sys


def _child(request: dict[str, object]) -> None:
    os.setsid()  # its own process group: a timeout kills it and whatever it started
    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    os.chdir(str(request["cwd"]))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, key in ((1, "out"), (2, "err")):
        f = os.open(str(request[key]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    import runpy

    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:  # what the interpreter would make of it
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    # The interpreter's own ending: atexit callbacks, threads joined, streams flushed.
    sys.exit(code)


def main() -> dict[str, object] | None:
    """Serve requests; in a forked child, return its request (run at the top level, so that the
    interpreter ends as usual: atexit callbacks, non-daemon threads joined)."""
    import importlib

    for name in sys.argv[1:]:  # what every request imports, paid once
        importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return dict(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
    return None


if __name__ == "__main__":
    forked = main()
    if forked is not None:
        _child(forked)
