"""trained-in-eval-mode: training steps run with the model left in eval mode by an evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, names, require
from traindoc.events import NO_GRADS, EvalPass, Event, Phase, StepEnd, TrainMode
from traindoc.findings import Finding


class _Track:
    """One model's modes on sampled training steps, in the current training phase."""

    def __init__(self) -> None:
        self.step = -1  # the step whose forwards are being gathered
        self.step_eval = False  # every training forward of that step ran in eval mode
        self.trained = False  # a step trained in train mode earlier in the phase
        self.eval_steps = 0  # sampled steps trained in eval mode after one in train mode
        self.first = -1  # the first of them
        self.last = -1
        self.back = -1  # the first sampled step trained in train mode again after them
        self.modules = 0
        self.names: tuple[str, ...] = ()
        self.where = ""
        self.train_steps = 0  # sampled steps trained in train mode
        self.no_grads = 0  # of the steps trained in eval mode, those whose step had no gradient


class TrainedInEvalMode(Detector):
    """A trained model's training forwards ran in eval mode on ``confirm`` sampled steps after
    it had trained in train mode: the model itself in eval mode (``model.eval()``) and every
    one of its Dropout/BatchNorm/stochastic-depth modules with it. That is an evaluation's
    ``model.eval()`` that nothing undid before training went on. A model trained in eval mode
    from its first step (fine-tuning with frozen statistics) is quiet, and so is a BatchNorm
    frozen alone (the model stays in train mode) and a model with no mode-dependent module. A
    new training phase (another optimizer) starts over. One finding for the run; its step is
    the first sampled step trained in eval mode."""

    id = "trained-in-eval-mode"
    needs = frozenset({"train_mode"})
    uses = frozenset({"eval", "phase", "step_skipped"})
    examples = (
        Example("zoo/trained_in_eval_mode_after_validation.py", 25),
        Example("zoo/trained_in_eval_mode_mid_epoch.py", 75),
        Example("zoo/healthy_validation_restores_train_mode.py", None),
        Example("zoo/healthy_frozen_bn_finetune.py", None),
    )

    # Carried over a resume: each model's track and the evaluations seen; whether it fired.
    carry = ("_tracks", "_eval_steps", "_eval_sites", "_no_grads", "_fired")

    @dataclass(frozen=True)
    class Config:
        confirm: int = 3  # sampled steps trained in eval mode

        def __post_init__(self) -> None:
            require(self, confirm=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._tracks: dict[str, _Track] = {}  # by the model's name
        self._eval_steps: list[int] = []  # the latest evaluations: their steps
        self._eval_sites: list[str] = []  # and where their first forward ran
        self._no_grads: list[int] = []  # the latest steps an optimizer stepped with no gradient
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, EvalPass):
            if event.role == "model" and event.index == 0:
                self._eval_steps = [*self._eval_steps[-15:], event.step]
                self._eval_sites = [*self._eval_sites[-15:], event.where]
            return
        if isinstance(event, StepEnd):
            if event.outcome == NO_GRADS:
                self._no_grads = [*self._no_grads[-63:], event.step]
            return
        if isinstance(event, Phase):
            for track in self._tracks.values():
                self._close(track)
                track.trained = False
            yield from self._judge()
            return
        assert isinstance(event, TrainMode)
        track = self._tracks.setdefault(event.model, _Track())
        if event.step != track.step:
            self._close(track)
            track.step, track.step_eval = event.step, True
        if event.in_eval < event.modules or not event.root_eval:
            track.step_eval = False  # a forward of the step trained in train mode
        else:
            track.modules, track.names, track.where = event.modules, event.names, event.where
        yield from self._judge()

    def finish(self) -> Iterator[Finding]:
        for track in self._tracks.values():
            self._close(track)
        yield from self._judge(final=True)

    def _close(self, track: _Track) -> None:
        """The step gathered so far is complete: count it."""
        if track.step < 0:
            return
        if not track.step_eval:
            track.trained = True
            track.train_steps += 1
            if track.first >= 0 and track.back < 0:
                track.back = track.step
        elif track.trained:
            track.eval_steps += 1
            track.no_grads += track.step in self._no_grads
            track.first = track.step if track.first < 0 else track.first
            track.last = track.step
        track.step = -1

    def _judge(self, final: bool = False) -> Iterator[Finding]:
        bad = {n: t for n, t in self._tracks.items() if t.eval_steps >= self.config.confirm}
        if not bad or (self._fired and not final):
            return
        self._fired = True
        yield self._finding(bad)

    def _finding(self, bad: dict[str, _Track]) -> Finding:
        name, t = min(bad.items(), key=lambda kv: kv[1].first)
        before = [i for i, step in enumerate(self._eval_steps) if step < t.first]
        evaluated = self._eval_steps[before[-1]] if before else None
        site = self._eval_sites[before[-1]] if before else ""
        after = f" after the evaluation at step {evaluated}" if before else ""
        at = f" ({site})" if site else ""
        empty = (f" {t.no_grads} of those steps got no gradient at all: the optimizer stepped with nothing "
                 "to apply." if t.no_grads else "")
        back = (f"; step {t.back} trained in train mode again, and later sampled steps ran in eval mode "
                "again" if 0 <= t.back < t.last else
                f"; step {t.back} trained in train mode again" if t.back >= 0 else
                "; no later sampled step trained in train mode")
        return finding(
            self.id, step=t.first,
            message=(
                f"{name} trained in eval mode on {t.eval_steps} sampled step(s) from step {t.first} to "
                f"{t.last}{after}{at}{back}; {t.train_steps} sampled step(s) trained in train mode. At those "
                f"training forwards{' (' + t.where + ')' if t.where else ''} the model and all {t.modules} of "
                f"its mode-dependent modules were in eval mode: {names(list(t.names))}. Dropout was off "
                f"and BatchNorm normalized with running statistics it no longer updated.{empty}"
            ),
            cause=("An evaluation called `.eval()` on the model and nothing called `.train()` before "
                   "training went on: the `.train()` call sits before the epoch loop, at the top of "
                   "an epoch while validation runs mid-epoch, or is missing."),
            fix=(f"Put {name} back in train mode where training resumes: call `model.train()` at the top "
                 "of every training iteration, or restore the mode at the end of the evaluation (`was = "
                 "model.training; model.eval(); ...; model.train(was)`)."),
            evidence={"model": name, "eval_steps": t.eval_steps, "first_step": t.first, "last_step": t.last,
                      "train_steps": t.train_steps, "no_gradient_steps": t.no_grads, "mode_modules": t.modules, "in_eval": list(t.names),
                      "train_mode_again_at": t.back if t.back >= 0 else None,
                      "evaluation_step": evaluated, "evaluation_at": site,
                      "models": sorted(bad)},
            where=list(dict.fromkeys(w for w in (t.where, site) if w)) or [name],
        )
