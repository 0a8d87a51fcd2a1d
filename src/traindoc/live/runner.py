"""``traindoc run script.py [args]``: run an unmodified script under observation.

The script runs as with ``python script.py args``: same ``sys.argv`` (``argv[0]`` as typed), an
absolute ``__file__``, ``__name__ == "__main__"`` and ``sys.modules["__main__"]`` its module,
``sys.path[0]`` its folder, stdout/stderr and exit code; the user's exceptions print their own
traceback (through ``sys.excepthook``, the script's own if it set one). ``--fail-on`` decides
the exit code only when the script itself succeeded.

The report goes to stderr at the end however the run ends (live/ending.py): normal end,
exception, ``sys.exit``, Ctrl-C, SIGTERM or SIGHUP (then the process ends by that signal, as
without traindoc), and after the non-daemon threads that still train when the main body returns.
"""

from __future__ import annotations

import argparse
import builtins
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindoc import config
from traindoc.errors import UsageError
from traindoc.live import ending
from traindoc.report import output

if TYPE_CHECKING:
    from traindoc.live.watch import Watch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ...",
                        help="run a module, as `python -m MODULE args`")
    parser.add_argument("--level", choices=("cheap", "standard", "thorough"), default="standard",
                        help="how much to measure (default standard)")
    parser.add_argument("--record", metavar="PATH", help="write the event stream as JSONL (replay with `traindoc analyze`)")
    parser.add_argument("--guard", action="store_true",
                        help="on a loss spike or a NaN loss, restore the last good state and halve the LR "
                             "(changes the training; stops after 3 rollbacks)")
    output.add_report_options(parser)
    parser.add_argument("target", nargs=argparse.REMAINDER, help="script.py and its own arguments")


def run(args: argparse.Namespace) -> int:
    if args.module:
        target, script_args = args.module[0], list(args.module[1:])
    elif args.module is not None:
        raise UsageError("-m needs a module name: `traindoc run -m mypkg.train ...`")
    elif args.target:
        target, script_args = args.target[0], list(args.target[1:])
    else:
        raise UsageError("nothing to run: give a script (`traindoc run train.py ...`) or `-m module`")
    if not args.module:
        path = Path(target)
        if not path.is_file():
            raise UsageError(f"{target}: no such file; give the training script's path")
    settings = config.load(Path(target).resolve().parent if not args.module else None)
    select, ignore = output.detector_choice(args, settings)
    ending.arm_exit()  # before torch's and the script's exit handlers, so it runs after them
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UsageError("torch is not installed: `traindoc run` observes PyTorch training; install torch") from None
    from traindoc.live.watch import Watch

    argv0 = str(Path(target)) if not args.module else target
    doc = Watch(level=args.level, select=select, ignore=ignore, record=args.record,
                settings=settings, script=argv0, argv=script_args, guard=getattr(args, "guard", False))
    rank0 = int(os.environ.get("RANK", "0")) == 0
    _watch_child_processes(args.level)

    def give(status: str, code: int) -> int:
        report = doc.close(status, code)
        return output.emit(report, args, settings) if rank0 else 0

    # SIGTERM/SIGHUP: the report, then death by the same signal (taken before the watch's own).
    signals = ending.Signals(give)
    signals.install()
    code, status, ctrl_c = _execute(doc, target, script_args, is_module=bool(args.module))
    with signals.reporting():  # a signal from now on waits for the report
        fail = give(status, code)
    if ctrl_c:  # as CPython after an uncaught KeyboardInterrupt: exit handlers, then death by SIGINT
        ending.end_by_signal_at_exit(signal.SIGINT)
    return code if code != 0 else fail


def _watch_child_processes(level: str) -> None:
    """Python processes the script starts with its own command line watch themselves too
    (``TRAINDOC=1``, _autostart.py): Lightning's ranks 1..N-1 re-run the script, and rank 0
    here waits for their fingerprints and merges their findings. A child reports only if it is
    rank 0 of a job of its own and trained; report files stay this process's."""
    os.environ["TRAINDOC"] = "1"
    os.environ["TRAINDOC_LEVEL"] = level
    for name in ("TRAINDOC_JSON", "TRAINDOC_HTML", "TRAINDOC_FAIL_ON"):
        os.environ.pop(name, None)


def _execute(doc: Watch, target: str, script_args: list[str], *,
             is_module: bool) -> tuple[int, str, bool]:
    """Run the user's code inside the watch, then wait for the threads that still run; return
    (exit code, status, whether an uncaught KeyboardInterrupt ended the main body)."""
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else ""
    sys.argv = [target if not is_module else target, *script_args]
    if not is_module:
        sys.path[0] = str(Path(target).resolve().parent)
    else:
        sys.path[0] = os.getcwd()
    doc.__enter__()
    try:
        if is_module:
            _run_module(target)
        else:
            _run_script(target)
        ended = 0, "ok"
    except SystemExit as exc:
        ended = _exit_code(exc.code), "exit"
    except KeyboardInterrupt as exc:
        _print_user_traceback(exc)
        ended = 130, "interrupted"
    except BaseException as exc:  # the user's exception: print it as Python would
        if type(exc).__name__ == "GuardStop":  # --guard gave up: its message, no traceback
            sys.stderr.write(f"{exc}\n")
            ended = 1, "stopped"
        else:
            _print_user_traceback(exc)
            ended = 1, "exception"
    finally:
        sys.argv = saved_argv
        if sys.path:
            sys.path[0] = saved_path0
    try:  # training may go on in threads: the report waits for them, as the interpreter would
        ending.wait_for_threads()
    except KeyboardInterrupt:  # Ctrl-C while waiting: Python stops waiting, keeps the exit code
        return ended[0], "interrupted", False
    return ended[0], ended[1], ended[1] == "interrupted"


def _run_script(path: str) -> None:
    """What ``python path`` does with a script: a fresh ``__main__`` module whose ``__file__``
    (and the code's file name, for tracebacks) is the absolute path. (``runpy.run_path`` keeps
    the path as given and rewrites ``sys.argv[0]``.)"""
    from importlib.machinery import SourceFileLoader

    absolute = os.path.abspath(path)
    with open(absolute, "rb") as f:
        code = compile(f.read(), absolute, "exec", dont_inherit=True)
    _run_main(code, __file__=absolute, __cached__=None, __package__=None, __spec__=None,
              __loader__=SourceFileLoader("__main__", absolute))


def _run_module(name: str) -> None:
    """What ``python -m name`` does (a package runs its ``__main__``): the module's code in a
    fresh ``__main__`` module, ``sys.argv[0]`` its file, as ``runpy.run_module(alter_sys=True)``
    does, except that the module stays ``__main__`` afterwards (runpy puts ours back)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations is not None:
        spec = importlib.util.find_spec(f"{name}.__main__")
    if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
        raise ImportError(f"No module named {name!r} that can be run")
    code = spec.loader.get_code(spec.name)
    if code is None:
        raise ImportError(f"No code object available for {spec.name}")
    if spec.has_location and spec.origin:
        sys.argv[0] = spec.origin
    _run_main(code, __file__=spec.origin if spec.has_location else None, __cached__=spec.cached,
              __package__=spec.parent, __spec__=spec, __loader__=spec.loader)


def _run_main(code: Any, **attrs: Any) -> None:
    """``code`` run as ``__main__``. The module stays ``sys.modules["__main__"]`` to the end of
    the process, as with ``python``: the script's exit handlers still find its globals, and
    pickle still finds the classes it defined (``torch.save(model)`` in an ``atexit``)."""
    from types import ModuleType

    main = ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, **attrs)
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def _print_user_traceback(exc: BaseException) -> None:
    """Through ``sys.excepthook``, the traceback without traindoc's frames, as ``python
    script.py`` shows it."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    ending.show_exception(exc, tb)
