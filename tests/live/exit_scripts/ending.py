"""A tiny training loop that ends the way ``argv[1]`` says (tests/live/test_exit_paths.py).

``argv[2]`` is a folder where the script's own handlers leave a file each, to show they ran.
Signals are sent by the script to itself at a given step, so nothing depends on timing.
"""

import atexit
import os
import signal
import sys
import threading

import torch

MODE, MARKS = sys.argv[1], sys.argv[2]
STEPS, AT = 12, 5  # the loop's steps; the step before which the run is ended


def mark(name: str) -> None:
    with open(os.path.join(MARKS, name), "w") as fh:
        fh.write(name)


class Checkpoint:
    """A class of the script's own: pickling it looks it up in ``sys.modules["__main__"]``."""


def save_at_exit() -> None:
    """As a script that saves ``torch.save(model)`` from an ``atexit`` handler: the script must
    still be ``__main__`` there, with its globals."""
    import pickle

    pickle.dumps(Checkpoint())
    assert sys.modules["__main__"].MODE == MODE
    mark("atexit")


def train(steps: int = STEPS, at: int = -1, then=None) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for step in range(steps):
        if step == at:
            then()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def kill(signum: int):
    def send() -> None:
        # CPython ends a run stopped by Ctrl-C by SIGINT after the exit handlers, unless one of
        # them ran exec or eval (it clears the interpreter's note of the KeyboardInterrupt: the
        # process then exits 1). torch's dynamo registers one that imports tabulate, whose
        # namedtuples are made by eval; with tabulate installed the bare script would exit 1.
        # This script checks the documented ending, so that handler is taken off.
        dynamo = sys.modules.get("torch._dynamo.utils")
        if dynamo is not None:
            atexit.unregister(dynamo.dump_compile_times)
        os.kill(os.getpid(), signum)
    return send


def fail() -> None:
    raise ValueError("the script's own error")


def user_handler(exits: bool):
    def handler(signum, frame):
        mark("handler")
        if exits:
            sys.exit(128 + signum)
    return handler


def user_hook(kind, value, tb):
    mark("excepthook")
    sys.stderr.write(f"user hook saw {kind.__name__}: {value}\n")


if MODE == "normal":
    train()
elif MODE == "raise":
    train(at=AT, then=fail)
elif MODE == "exit3":
    train(at=AT, then=lambda: sys.exit(3))
elif MODE in ("sigint", "sigterm", "sighup"):
    train(at=AT, then=kill(getattr(signal, MODE.upper())))
elif MODE in ("handler-returns", "handler-exits"):
    signal.signal(signal.SIGTERM, user_handler(exits=MODE == "handler-exits"))
    train(at=AT, then=kill(signal.SIGTERM))
elif MODE == "handler-chains":  # calls the handler it replaced when that one is callable
    previous = signal.getsignal(signal.SIGTERM)

    def chaining(signum, frame):
        mark("handler")
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, chaining)
    train(at=AT, then=kill(signal.SIGTERM))
elif MODE == "excepthook":
    sys.excepthook = user_hook
    train(at=AT, then=fail)
elif MODE in ("atexit", "atexit-sigint"):
    atexit.register(save_at_exit)
    train(at=AT if MODE == "atexit-sigint" else -1, then=kill(signal.SIGINT))
elif MODE == "thread":  # the main body returns at once; the training thread goes on
    threading.Thread(target=train, name="trainer").start()
elif MODE == "thread-sigterm":  # the training thread signals the process, then waits for ever
    def trainer() -> None:
        train(at=AT, then=lambda: (os.kill(os.getpid(), signal.SIGTERM), threading.Event().wait()))

    threading.Thread(target=trainer, name="trainer").start()
elif MODE == "executor":  # an executor never shut down: its workers are non-daemon threads
    from concurrent.futures import ThreadPoolExecutor

    ThreadPoolExecutor(2).submit(train)
elif MODE == "fork-sigterm":  # a forked child (as a DataLoader worker) ended by SIGTERM
    child = os.fork()
    if child == 0:
        os.kill(os.getpid(), signal.SIGTERM)
        os._exit(0)  # not reached: the default action ends the child
    _, how = os.waitpid(child, 0)
    if not (os.WIFSIGNALED(how) and os.WTERMSIG(how) == signal.SIGTERM):
        sys.exit(f"the forked child ended with status {how}, not by SIGTERM")
    train()
elif MODE == "watch-sigterm":  # traindoc.watch() in the script, run with plain python
    import traindoc

    with traindoc.watch():
        train(at=AT, then=kill(signal.SIGTERM))
else:
    raise SystemExit(f"unknown mode {MODE}")
