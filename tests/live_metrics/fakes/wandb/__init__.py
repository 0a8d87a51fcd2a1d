"""A tiny stand-in for wandb, shaped like the real one: ``wandb.log`` raises until
``wandb.init()`` rebinds it to ``run.log`` (a method of ``wandb.sdk.wandb_run.Run``)."""

from wandb.sdk.wandb_run import Run

run = None
logged: list[dict] = []


def init(**kwargs):
    global run, log
    run = Run(logged)
    log = run.log
    return run


def log(data, step=None, commit=None):  # replaced by init()
    raise RuntimeError("You must call wandb.init() before wandb.log()")
