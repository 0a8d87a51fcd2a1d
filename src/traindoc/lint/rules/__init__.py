"""The explicit registry of lint rules: every rule class, in one tuple.

One rule per module, named after the failure it finds; each carries ``invalid`` snippets
(must fire, at the given lines) and ``valid`` near-misses (must stay quiet). A test checks
that the modules on disk and this tuple agree, and one parametrized test runs every example.
"""

from __future__ import annotations

from traindoc.lint.rules._common import Rule, snippet
from traindoc.lint.rules.autograd_collective import AutogradCollective
from traindoc.lint.rules.bf16_master_weights import Bf16MasterWeights
from traindoc.lint.rules.checkpoint_incomplete import CheckpointIncomplete
from traindoc.lint.rules.checkpoint_not_atomic import CheckpointNotAtomic
from traindoc.lint.rules.clip_before_unscale import ClipBeforeUnscale
from traindoc.lint.rules.constant_loss import ConstantLoss
from traindoc.lint.rules.detached_prediction import DetachedPrediction
from traindoc.lint.rules.ema_without_buffers import EmaWithoutBuffers
from traindoc.lint.rules.eval_in_train_mode import EvalInTrainMode
from traindoc.lint.rules.grad_cleared_before_step import GradClearedBeforeStep
from traindoc.lint.rules.inference_tensor_in_autograd import InferenceTensorInAutograd
from traindoc.lint.rules.masked_nonfinite import MaskedNonfinite
from traindoc.lint.rules.missing_zero_grad import MissingZeroGrad
from traindoc.lint.rules.muon_adamw_scale_lr import MuonAdamwScaleLr
from traindoc.lint.rules.scheduler_before_optimizer import SchedulerBeforeOptimizer
from traindoc.lint.rules.unscaled_grad_accumulation import UnscaledGradAccumulation

# mypy checks each class against the Rule protocol here.
RULES: tuple[type[Rule], ...] = (
    MaskedNonfinite,
    ConstantLoss,
    DetachedPrediction,
    Bf16MasterWeights,
    SchedulerBeforeOptimizer,
    MissingZeroGrad,
    GradClearedBeforeStep,
    UnscaledGradAccumulation,
    ClipBeforeUnscale,
    EvalInTrainMode,
    EmaWithoutBuffers,
    InferenceTensorInAutograd,
    CheckpointNotAtomic,
    CheckpointIncomplete,
    AutogradCollective,
    MuonAdamwScaleLr,
)


def by_id() -> dict[str, type[Rule]]:
    return {cls.id: cls for cls in RULES}


def ids() -> list[str]:
    return [cls.id for cls in RULES]


def rule_docs(id_: str) -> str | None:
    """Markdown for ``traindoc explain ID``: the lint rule's examples, which are also its tests.
    What the rule looks for is on the catalog page, the one place a failure is described; the
    class docstring is for whoever changes the rule. None when no lint rule reports ``id_``."""
    cls = by_id().get(id_)
    if cls is None:
        return None
    out = [f"## Lint rule `{id_}`", "", "Its examples, which are also its tests.", "", "### Fires on", ""]
    for example in cls.invalid:
        lines = ", ".join(str(n) for n in example.lines)
        out += [f"Fires at line {lines}:", "", "```python", snippet(example.code).rstrip(), "```", ""]
    out += ["### Stays quiet on", ""]
    for code in cls.valid:
        out += ["```python", snippet(code).rstrip(), "```", ""]
    out.append(f"Silence one line with `# traindoc: ignore[{id_}]`.")
    return "\n".join(out)
