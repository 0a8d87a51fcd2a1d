"""bf16-master-weights: the parameters an optimizer trains are bf16/fp16."""

from __future__ import annotations

from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding
from traindoc.events import Cast, Event, Optimizer, ParamStats, RunStart
from traindoc.findings import Finding

LOW = ("torch.bfloat16", "torch.float16")

# When a framework made the cast for the user, the fix is that framework's setting.
_FRAMEWORK_FIX = {
    "lightning": ('Use `L.Trainer(precision="bf16-mixed")` (or "16-mixed") instead of "bf16-true"/'
                  '"16-true": Lightning then keeps fp32 weights and runs the forward under autocast.'),
    "pytorch_lightning": ('Use `Trainer(precision="bf16-mixed")` instead of "bf16-true": Lightning '
                          'then keeps fp32 weights and runs the forward under autocast.'),
    "transformers": ("Load the model in float32 (`torch_dtype=torch.float32`, not bfloat16) and "
                     "set `TrainingArguments(bf16=True)`: the Trainer then runs the forward under "
                     "autocast and AdamW updates fp32 weights."),
    "accelerate": ("Keep the model in float32 and use `Accelerator(mixed_precision=\"bf16\")`: "
                   "Accelerate then runs the forward under autocast."),
}


class Bf16MasterWeights(Detector):
    """An optimizer trains parameters stored in bf16/fp16 (the model was cast, e.g.
    ``model.to(torch.bfloat16)``, or built in that dtype: ``from_pretrained(...,
    torch_dtype=torch.bfloat16)``) instead of fp32 parameters with autocast. The evidence names
    the cast's file:line when the live source saw it, and says so when a live run saw no cast."""

    id = "bf16-master-weights"
    needs = frozenset({"optimizer"})
    uses = frozenset({"cast", "params", "run"})  # run: a live source, which sees every cast
    examples = (
        Example("demo_scripts/bf16_master.py", 0),
        Example("demo_scripts/healthy_bf16_autocast.py", None),
        Example("ckpt/golden/bf16_norms_frozen_diff.jsonl", 20),  # ckpt: bf16 optimizer state
        Example("ckpt/golden/complete_training.jsonl", None),
    )

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        self._casts: list[Cast] = []
        self._fired = False
        self._live = False

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, RunStart):
            self._live = event.source == "live"
            return
        if isinstance(event, Cast):
            self._casts.append(event)
            return
        if self._fired or isinstance(event, ParamStats):
            return
        assert isinstance(event, Optimizer)
        dtypes = [d for g in event.groups for d in g.dtypes]
        low = [d for d in dtypes if d in LOW]
        if not low:
            return
        self._fired = True
        dtype = max(set(low), key=low.count)
        cast = self._casts[-1] if self._casts else None
        born = self._live and cast is None  # a live run sees every cast: none ran, so born in that dtype
        if born:
            site = (" (created in that dtype, no cast ran: a loader's dtype option such as "
                    "`from_pretrained(..., torch_dtype=torch.bfloat16)`, layers built with `dtype=`, or "
                    "`torch.set_default_dtype`)")
            undo = "Build or load the model in float32 (drop the dtype option)"
        else:
            where = cast.where if cast else ""
            site = f" (cast at {where}: `{cast.module}` to {cast.dtype})" if cast and where else ""
            undo = f"Remove the cast{' at ' + where if where else ''}"
        yield finding(
            self.id, step=event.step,
            message=(
                f"{event.cls} trains {len(low)} of {len(dtypes)} parameters stored as {dtype}{site}; "
                "the optimizer has no fp32 copy of them."
            ),
            fix=_FRAMEWORK_FIX.get(cast.via if cast else "") or (
                f"{undo} and keep fp32 parameters; get the speed with `torch.autocast(device_type, "
                "dtype=torch.bfloat16)` around the forward pass (and a GradScaler for fp16)."
            ),
            evidence={"optimizer": event.cls, "low_precision_params": len(low), "params": len(dtypes),
                      "dtype": dtype, "cast_site": cast.where if cast else "",
                      "cast_by": cast.via if cast else ""},
            where=[cast.where] if cast and cast.where else [],
        )
