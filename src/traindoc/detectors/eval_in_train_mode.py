"""eval-in-train-mode: evaluation runs with BatchNorm or Dropout layers in train mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator, Mapping

from traindoc.detectors import _carry
from traindoc.detectors._common import Example, finding, names
from traindoc.detectors._maths import Head
from traindoc.events import Event, EvalPass
from traindoc.findings import Finding


# What carries over a resume (Engine.state_dict): the evaluations that ran in train mode (how
# many, the first 20) and evaluations in all.
_CARRIED = ("_bad", "_phases")


class EvalInTrainMode:
    """An evaluation phase (forward passes under no_grad or inference_mode after an optimizer
    step, live) found modules whose behaviour depends on the mode in train mode: BatchNorm with
    running statistics, Dropout with p > 0, stochastic depth. Models without such modules behave
    the same in both modes and stay quiet; ``torch.optim.swa_utils.update_bn``, which runs the
    model in train mode on purpose, is not an evaluation."""

    id: ClassVar[str] = "eval-in-train-mode"
    needs: ClassVar[frozenset[str]] = frozenset({"eval"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("zoo/eval_train_mode.py", 19),
        Example("zoo/healthy_cnn_bn.py", None),
        Example("live/golden/eval_train_mode.jsonl", 19),
        Example("live/golden/healthy_eval.jsonl", None),
    )

    @dataclass(frozen=True)
    class Config:
        pass

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._bad: Head[EvalPass] = Head(20)  # evaluations in train mode: how many, the first 20
        self._phases = 0

    def state_dict(self) -> dict[str, object]:
        """Its history, for a resumed run (``_CARRIED``)."""
        return _carry.save(self, _CARRIED)

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        _carry.load(self, state, _CARRIED)

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, EvalPass)
        self._phases += 1
        if not event.train_modules:
            return
        self._bad.append(event)
        if self._bad.count == 1:
            yield self._finding()

    def finish(self) -> Iterator[Finding]:
        if self._bad.count:
            yield self._finding()

    def _finding(self) -> Finding:
        e = self._bad.items[0]
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
