"""The training loop's bookkeeping: loss terms, schedulers, accumulation, evaluation, data."""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class LossTerm:
    """One term of a multi-term loss (``loss = w1 * term1 + w2 * term2 ...``) on a sampled step.

    ``weight`` is the scalar factor between the loss and the term found in the autograd graph
    (1.0 when there is none). ``grad`` is the L2 norm of the *weighted* term's gradient over the
    parameter tensors that at least two terms reach (``shared`` of the ``params`` tensors the
    loss reaches), ``grad_all`` over all of them; None when not measured. ``value`` is the
    weighted term's value when the term is a named tensor, else None. ``named`` says where the
    name comes from: "user" (``traindoc.loss_terms``), "variable" (a local variable of the
    user's code) or "op" (the autograd op, e.g. ``mse_loss``). ``terms`` counts the terms of
    this loss; ``where`` is the ``file:line`` of the backward() call.
    """

    step: int
    name: str
    weight: float
    grad: float | None = None
    grad_all: float | None = None
    value: float | None = None
    terms: int = 0
    shared: int = 0
    params: int = 0
    named: str = "op"
    where: str = ""
    signal: ClassVar[str] = "loss_terms"

@dataclass(frozen=True)
class SchedulerStep:
    """An LR scheduler's first ``step()`` calls against its optimizer's first ``step()`` (live);
    one event per scheduler, sent when the optimizer first steps (or at the scheduler's first
    call when the optimizer already stepped). ``early``: calls made before the optimizer's first
    step; ``skipped``: of those, calls made after an AMP GradScaler skipped the optimizer's
    step (Inf/NaN gradients), which is not the user's ordering. LRs are parameter group 0's:
    ``lr_start`` just before the first early call (the schedule's first value), ``lr_after``
    just after the early calls, ``lr_first`` the LR the optimizer's first step used (NaN:
    unknown). ``where`` is the ``file:line`` of the first early call."""

    step: int
    scheduler: str
    optimizer: str
    early: int = 0
    skipped: int = 0
    lr_start: float = float("nan")
    lr_after: float = float("nan")
    lr_first: float = float("nan")
    where: str = ""
    signal: ClassVar[str] = "scheduler"

@dataclass(frozen=True)
class GradAccumulation:
    """How one optimizer's gradients were built between its previous ``step()`` and this one,
    on a sampled step (live). ``backwards``: backward() calls in between, ``batches``:
    DataLoader batches drawn in between. ``scale``: the constant factor the loss function's
    value was multiplied by before backward (1.0: handed over as computed; the largest over the
    calls; NaN: unknown). ``norms``: the optimizer's total gradient norm after each of those
    calls (at most 16); ``carried``: its norm just before the first of them (0.0: no
    gradients). ``cleared``: the gradients were None or all zero before at least one of them.
    ``interleaved``: another optimizer stepped between those calls (GAN-style alternation).
    ``sites``: how many distinct lines of the user's code those backward() calls came from (1:
    a loop over micro-batches; 0: unknown); ``retained``: one of them kept its graph
    (``retain_graph=True``: several terms of one loss, not micro-batches); ``restarted``: the
    gradients were None or zero again before a later call, so each call started over and none
    accumulated (an optimizer's step evaluating its closure: LBFGS); ``rollout``: every call
    after the first came with no forward of the model since the one before, while forwards came
    before the first (the terms of one objective computed in a rollout and backpropagated one by
    one, as per-time-step REINFORCE does: not micro-batches). ``stepped``: the total gradient
    norm the step itself used, after whatever the script did to the gradients since the last
    backward (NaN: not measured). ``fed_by``: the model whose gradients the optimizer's were
    handed over from by assignment (A3C's local copy, a bf16 working copy), when they were: the
    norms and the clearing are then that model's gradients'."""

    step: int
    optimizer: int
    cls: str
    lr: float
    backwards: int
    batches: int
    scale: float
    norms: tuple[float, ...]
    carried: float
    cleared: bool
    interleaved: bool = False
    params: int = 0
    backward_where: str = ""
    where: str = ""  # file:line of the optimizer's step() call
    sites: int = 0
    retained: bool = False
    restarted: bool = False
    rollout: bool = False
    stepped: float = math.nan
    fed_by: str = ""
    signal: ClassVar[str] = "accumulation"

@dataclass(frozen=True)
class EvalPass:
    """One evaluation phase (live): forward passes of a model under ``no_grad`` or
    ``inference_mode`` after an optimizer step, until training resumes. ``step`` is the last
    optimizer step before it; ``model`` its class, ``role`` "model" when an optimizer holds its
    parameters, "copy" when it has the parameter shapes of such a model (an EMA or averaged
    copy, a target network), "other" otherwise (a distillation teacher, a reference model). ``duration_s``: wall time from
    entering its first no_grad region to leaving its last (traindoc's own re-run excluded);
    ``elapsed_s``: the run's wall time at its end. ``train_modules``: mode-dependent
    submodules (BatchNorm, Dropout ...) found in train mode at its first forward, as
    ``name (Type)``, of ``mode_modules``. ``rerun``: the largest difference between the first
    forward's output and a second forward on the same input, relative to the output's largest
    magnitude (NaN: not re-run); ``rerun_abs`` the absolute difference; ``first_diff`` the
    first module whose output differed (``name (Type)``, "" when not located). A phase that
    evaluates several models (the model, then its EMA) sends one event per model: ``index``
    counts them, and only the first (``index`` 0) carries the phase's ``duration_s``.
    ``sampled``: traindoc's re-run of the model found its only random ops inside a
    ``torch.distributions`` distribution: its output is a draw from what it predicts (a
    stochastic policy acting, a posterior sample), different from pass to pass on purpose, and
    its passes without gradients generate data (an RL rollout) rather than evaluate. ``rows``:
    the batch size of the first forward's input (1 for one unbatched vector, -1 when it is not
    a tensor)."""

    step: int
    model: str
    role: str
    duration_s: float
    elapsed_s: float
    train_modules: tuple[str, ...] = ()
    mode_modules: int = 0
    rerun: float = float("nan")
    rerun_abs: float = float("nan")
    first_diff: str = ""
    where: str = ""
    index: int = 0
    training: bool = False  # the model was in train mode (no model.eval()): a rollout, maybe
    sampled: bool = False
    rows: int = -1
    signal: ClassVar[str] = "eval"

@dataclass(frozen=True)
class LoaderWait:
    """Time the training loop waited on a DataLoader (live), over the ``steps`` steps since the
    previous event: the median per step of the wait (time in the iterator's ``__next__``) and
    of the step's wall time. Steps that start an iterator (worker start-up) are left out. The
    loader's settings: ``loader`` its dataset class, ``batch_size``, ``num_workers``,
    ``pin_memory``, ``prefetch_factor`` (0 without workers), ``persistent_workers``; ``device``
    the device type of the trained parameters ("cpu", "cuda", "" when unknown)."""

    step: int
    steps: int
    wait_s: float
    step_s: float
    loader: str = ""
    batch_size: int = 0
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int = 0
    persistent_workers: bool = False
    device: str = ""
    signal: ClassVar[str] = "data_wait"
