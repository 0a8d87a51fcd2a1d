"""eval-in-train-mode: evaluation runs with BatchNorm or Dropout layers in train mode."""

from __future__ import annotations

import math
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, names
from traindoc.detectors._maths import Head
from traindoc.events import BatchNormState, Event, EvalPass
from traindoc.findings import Finding


class EvalInTrainMode(Detector):
    """An evaluation phase (forward passes under no_grad or inference_mode after an optimizer
    step, live) found modules whose behaviour depends on the mode in train mode: BatchNorm with
    running statistics, Dropout with p > 0, stochastic depth. Models without such modules behave
    the same in both modes and stay quiet; ``torch.optim.swa_utils.update_bn``, which runs the
    model in train mode on purpose, is not an evaluation.

    Nor is a "precise BN" pass: BatchNorm statistics reset (``reset_running_stats()``,
    ``momentum=None``) and re-estimated by train-mode forwards under no_grad before the
    evaluation. Its phase starts with every train-mode BatchNorm module holding reset
    statistics (running_mean 0, running_var 1, num_batches_tracked 0: the phase's
    ``BatchNormState``) in a model that trained (its affine weights moved, or past step 0);
    a genuine evaluation in train mode meets the statistics training left. A later phase with
    the same modules in train mode and no statistics read (they are read on the first five
    evaluations, then every tenth) is judged as the phases it repeats. Such a phase is judged
    when its statistics arrive, at the latest at the end of the run.

    A model with no such module can still depend on the mode: ``F.dropout(x, p,
    training=self.training)`` in its forward (the older MNIST example). When an evaluation
    runs it in train mode, live traindoc re-runs its first forward once in eval mode from the
    same RNG state (on the first two evaluations); an output that changes (``first_diff``: the
    first submodule whose output differs) means the evaluation is not what model.eval() would
    give: dropout was active though no backward follows. Random ops that ignore the mode
    (a policy's sampling, a VAE's noise) give the same numbers again and stay quiet.

    Monte Carlo dropout is deliberate: an evaluation that feeds the same input tensor to the
    model three times or more, with only Dropout-like modules in train mode, is not counted
    (live drops its Dropout modules from ``train_modules``); a BatchNorm in train mode there
    still is."""

    id = "eval-in-train-mode"
    needs = frozenset({"eval"})
    uses = frozenset({"bn"})
    examples = (
        Example("zoo/eval_train_mode.py", 19),
        Example("zoo/mnist_functional_dropout_no_eval.py", 24),
        Example("zoo/gcn_functional_dropout_no_eval.py", 0),
        Example("zoo/healthy_cnn_bn.py", None),
        Example("zoo/healthy_precise_bn.py", None),
        Example("zoo/healthy_swa_update_bn.py", None),
        Example("zoo/healthy_mnist_functional_dropout_eval.py", None),
        Example("zoo/healthy_gcn_functional_dropout_eval.py", None),
        Example("zoo/healthy_mc_dropout_uncertainty.py", None),
        Example("live/golden/eval_train_mode.jsonl", 19),
        Example("live/golden/healthy_eval.jsonl", None),
    )

    # Carried over a resume: the evaluations that ran in train mode (how many, the first 20),
    # evaluations in all, and the train-mode module sets seen re-estimating.
    carry = ("_bad", "_phases", "_recalibrating")

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        self._bad: Head[EvalPass] = Head(20)  # evaluations in train mode: how many, the first 20
        self._phases = 0
        self._pending: list[EvalPass] = []  # train-mode phases waiting for their statistics
        self._bn: dict[tuple[int, str, str], BatchNormState] = {}  # (step, role, module), recent
        self._recalibrating: list[list[str]] = []  # train-mode module sets of re-estimation passes

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, BatchNormState):
            if event.step is not None:
                self._bn[(event.step, event.role, event.module)] = event
                if len(self._bn) > 512:  # only the phases still pending need them
                    del self._bn[next(iter(self._bn))]
            yield from self._judge(final=False)
            return
        assert isinstance(event, EvalPass)
        self._phases += 1
        if not event.train_modules and not _mode_changes_output(event):
            return
        self._pending.append(event)
        yield from self._judge(final=False, before=event.step)

    def finish(self) -> Iterator[Finding]:
        list(self._judge(final=True))
        if self._bad.count:
            yield self._finding()

    def _judge(self, final: bool, before: int = -1) -> Iterator[Finding]:
        """The pending train-mode phases whose statistics arrived, and those of a step before
        ``before`` (their statistics, sent at the next step's end, would have come: a model
        whose BatchNorm keeps no running statistics sends none) or all of them when ``final``:
        a re-estimation pass is dropped, any other counts as an evaluation in train mode (the
        first one found now yields the finding)."""
        waiting = []
        for e in self._pending:
            verdict = self._recalibration(e, final or e.step < before)
            if verdict is None:
                waiting.append(e)
            elif not verdict:
                self._bad.append(e)
                if self._bad.count == 1 and not final:
                    yield self._finding()
        self._pending = waiting

    def _recalibration(self, e: EvalPass, final: bool) -> bool | None:
        """True when phase ``e`` starts with a precise-BN pass, False when not, None while its
        BatchNorm statistics may still arrive (never when ``final``)."""
        role = "model" if e.role == "model" else "ema"
        bn = [m for m in e.train_modules if "BatchNorm" in m]  # "bn1 (BatchNorm2d)"
        if not bn:
            return False
        names = sorted(m.rsplit(" (", 1)[0] for m in bn)
        read = [self._bn.get((e.step, role, n)) for n in names]
        if all(r is not None for r in read):
            reset = e.step > 0 and all(
                r is not None and r.mean_at_init and r.var_at_init and r.num_batches_tracked == 0
                and r.affine_at_init is not True for r in read)
            if reset and names not in self._recalibrating and len(self._recalibrating) < 8:
                self._recalibrating.append(names)
            return reset
        if names in self._recalibrating:
            return True
        return False if final else None

    def _finding(self) -> Finding:
        e = self._bad.items[0]
        if not e.train_modules:
            return self._functional_finding(e)
        mods = list(e.train_modules)
        bn = any("Norm" in m for m in mods)
        drop = any("Drop" in m or "Stochastic" in m for m in mods)
        effects = []
        if bn:
            effects.append("BatchNorm normalized each validation batch with its own statistics and "
                           "folded validation data into its running statistics")
        if drop:
            effects.append("Dropout dropped units, so the outputs are noisy and biased")
        at = f" (first forward at {e.where})" if e.where else ""
        return finding(
            self.id, step=e.step,
            message=(
                f"evaluation after step {e.step} ran {e.model} under no_grad with {len(mods)} of "
                f"{e.mode_modules} mode-dependent modules in train mode{at}: {names(mods)}; "
                f"{self._bad.count} of {self._phases} evaluations so far. "
                + ("; ".join(effects) + "." if effects else "")
            ),
            cause=(
                "The evaluation code does not call model.eval() (or calls it on another object, "
                "such as the unwrapped module or an EMA copy, than the one evaluated), or "
                "model.train() at the top of the loop switched the model back before evaluating."
                + (" The running statistics of BatchNorm now include validation data: evaluation "
                   "changed the model." if bn else "")
            ),
            fix=(
                f"Set and restore the mode around evaluation{at}: `model.eval()`, then "
                "`with torch.no_grad(): ...`, then `model.train()`. With several models (EMA, "
                "teacher) call .eval() on each one you evaluate. If this is deliberate (MC dropout, "
                "re-estimating BatchNorm statistics), silence this id."
            ),
            evidence={"model": e.model, "role": e.role, "train_mode_modules": mods[:50],
                      "mode_dependent_modules": e.mode_modules, "evaluations": self._phases,
                      "evaluations_in_train_mode": self._bad.count,
                      "steps": [b.step for b in self._bad.items]},
            where=[e.where] if e.where else [],
        )

    def _functional_finding(self, e: EvalPass) -> Finding:
        at = f" (first forward at {e.where})" if e.where else ""
        where = "its output" if e.first_diff == "output" else f"first at {e.first_diff}"
        return finding(
            self.id, step=e.step,
            message=(
                f"evaluation after step {e.step} ran {e.model} under no_grad in train mode{at}; it "
                f"has no Dropout or BatchNorm module, but re-run once in eval mode from the same RNG "
                f"state its output changed by {fmt(e.rerun_abs)} ({where}): the forward reads "
                f"self.training, so the evaluation ran with training behaviour (dropout active) "
                f"though no backward follows; {self._bad.count} of {self._phases} evaluations so far."
            ),
            cause=("The evaluation code does not call model.eval(), and the model applies dropout "
                   "functionally, `F.dropout(x, p, training=self.training)`, so there is no "
                   "Dropout module whose mode would show it."),
            fix=(f"Call `model.eval()` before the evaluation{at} and `model.train()` after it. If "
                 "stochastic passes are wanted (MC dropout), average several passes over the "
                 "same batch on purpose."),
            evidence={"model": e.model, "role": e.role, "train_mode_modules": [],
                      "changed_in_eval_mode": e.first_diff, "difference": e.rerun_abs,
                      "evaluations": self._phases, "evaluations_in_train_mode": self._bad.count,
                      "steps": [b.step for b in self._bad.items]},
            where=[e.where] if e.where else [],
        )


def _mode_changes_output(e: EvalPass) -> bool:
    """A train-mode evaluation whose re-run in eval mode gave another output (live)."""
    return e.training and bool(e.first_diff) and math.isnan(e.rerun)
