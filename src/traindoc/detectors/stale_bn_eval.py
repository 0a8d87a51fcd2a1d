"""stale-bn-eval: BatchNorm running statistics that were never updated in a trained model."""

from __future__ import annotations

from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, names
from traindoc.events import BatchNormState, EvalPass, Event
from traindoc.findings import Finding


class StaleBnEval(Detector):
    """BatchNorm modules whose running statistics are still at their initial values (running_mean
    all 0 and running_var all 1, num_batches_tracked 0) although the model around them was
    trained: the module's affine weight or bias moved, the training model's statistics for the
    same module moved (an EMA copy), or, without affine parameters, the checkpoint is past step 0.
    From two checkpoints it also catches an EMA copy whose statistics stayed bit-identical while
    the model's changed (its buffers are never copied or averaged). A fresh, untrained model has
    initial statistics everywhere and stays quiet; so does ``num_batches_tracked == 0`` with moved
    statistics, because evaluation reads only running_mean and running_var.

    Live, the statistics are read at the first forward of each evaluation phase. When the
    module ran that forward in train mode (the phase's ``EvalPass`` lists it), the forward
    re-estimates the statistics instead of reading them: a deliberate "precise BN" pass that
    reset them (``reset_running_stats()``, ``momentum=None``) shows initial values that the
    evaluation after it never reads. Such a reading is not judged; the module's latest reading
    in eval mode is."""

    id = "stale-bn-eval"
    needs = frozenset({"bn"})
    uses = frozenset({"eval"})
    examples = (
        Example("ckpt/golden/ema_stale_bn.jsonl", 8),
        Example("ckpt/golden/ema_frozen_bn_diff.jsonl", 500),
        Example("ckpt/golden/healthy_bn_ema.jsonl", None),
        Example("ckpt/golden/fresh_bn_model.jsonl", None),
        Example("zoo/ema_stale_bn.py", -1),  # live: BatchNormState at each evaluation
        Example("zoo/healthy_ema_bn.py", None),
        Example("zoo/healthy_precise_bn.py", None),
        Example("zoo/healthy_swa_update_bn.py", None),
        Example("zoo/precise_bn_calibrated_in_eval.py", -1),  # reset, then "re-estimated" in eval mode
    )

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        # Per (role, module), its latest readings in order (bounded): the latest one not taken
        # at a forward in train mode is judged.
        self._readings: dict[tuple[str, str], list[BatchNormState]] = {}
        self._train_mode: set[tuple[int, str, str]] = set()  # (step, role, module) run in train mode

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, EvalPass):
            role = "model" if event.role == "model" else "ema"  # the BatchNormState roles
            for m in event.train_modules:  # "name (Type)"
                self._train_mode.add((event.step, role, m.rsplit(" (", 1)[0]))
            if len(self._train_mode) > 20_000:  # bounded: only the steps of kept readings matter
                held = {(e.step, e.role, e.module) for r in self._readings.values() for e in r}
                self._train_mode = {k for k in self._train_mode if k in held or k[0] >= event.step}
            return iter(())
        assert isinstance(event, BatchNormState)
        kept = self._readings.setdefault((event.role, event.module), [])
        kept.append(event)
        del kept[:-8]
        return iter(())

    def _latest(self) -> dict[tuple[str, str], BatchNormState]:
        """Per module, its latest reading not taken at a forward in train mode: that forward
        re-estimates the statistics (precise BN) rather than reading them. A module read only
        in train mode has no reading an evaluation relied on, and is left out."""
        out = {}
        for key, readings in self._readings.items():
            read = [e for e in readings if e.step is None or (e.step, e.role, e.module) not in self._train_mode]
            if read:
                out[key] = read[-1]
        return out

    def finish(self) -> Iterator[Finding]:
        seen = self._latest()
        stale: list[tuple[BatchNormState, str]] = []
        for (role, module), e in seen.items():
            twin = seen.get(("model", module)) if role != "model" else None
            if e.mean_at_init and e.var_at_init:
                if e.affine_at_init is False:
                    stale.append((e, "its affine weight/bias moved"))
                elif twin is not None and not (twin.mean_at_init and twin.var_at_init):
                    stale.append((e, "the model's statistics for it moved"))
                elif e.affine_at_init is None and e.step is not None and e.step > 0:
                    stale.append((e, f"the checkpoint is at step {e.step}"))
            elif role != "model" and e.changed is False and twin is not None and twin.changed:
                stale.append((e, "its statistics did not change between the checkpoints while the model's did"))
        if not stale:
            return
        roles = sorted({e.role for e, _ in stale})
        role = "ema" if "ema" in roles else roles[0]
        group = [(e, why) for e, why in stale if e.role == role]
        total = sum(1 for (r, _) in seen if r == role)
        mods = [e.module for e, _ in group]
        first = group[0][0]
        nbt = sorted({e.num_batches_tracked for e, _ in group if e.num_batches_tracked is not None})
        frozen_copy = all(not (e.mean_at_init and e.var_at_init) for e, _ in group)
        if frozen_copy:
            what = ("kept bit-identical running statistics between the two checkpoints while the "
                    "model's changed")
        else:
            what = ("still hold their initial running statistics (running_mean all 0, running_var all 1"
                    + (f", num_batches_tracked {nbt[0]}" if len(nbt) == 1 else "") + f") although {group[0][1]}")
        copy = "the EMA/averaged copy" if role == "ema" else "the model"
        yield finding(
            self.id, step=first.step,
            message=(
                f"{len(group)} of {total} BatchNorm modules of {copy} {what}: {names(mods)}. "
                "Evaluated in eval mode, these layers normalize with statistics that do not "
                "describe the data."
            ),
            cause=(
                "An EMA copy that averages only parameters (`for e, p in zip(ema.parameters(), "
                "model.parameters())`): its BatchNorm buffers keep the values of the copy made at "
                "step 0. (torch.optim.swa_utils.AveragedModel copies the model's buffers at every "
                "update_parameters() since torch 2.0; before 2.0 it left them as copied at "
                "construction.)"
                if role == "ema" else
                "The BatchNorm layers never ran in train mode: the model stayed in eval mode "
                "while training (model.eval() not undone, or BN layers frozen with .eval()), or "
                "the model was rebuilt from a state_dict without its buffers."
            ),
            fix=(
                "Average buffers too: AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999), "
                "use_buffers=True); or copy them after each EMA update: `for e, b in "
                "zip(ema.buffers(), model.buffers()): e.copy_(b)`; or run "
                "torch.optim.swa_utils.update_bn(train_loader, ema) before evaluating. Until then "
                "evaluate the live model."
                if role == "ema" else
                "Call model.train() before the training steps (and model.eval() only around "
                "evaluation); save and load the full state_dict, buffers included."
            ),
            evidence={"role": role, "modules": mods[:50], "stale": len(group), "batchnorm_modules": total,
                      "num_batches_tracked": [int(x) for x in nbt][:5], "reason": group[0][1],
                      "other_roles": [r for r in roles if r != role]},
            where=mods[:10],
        )
