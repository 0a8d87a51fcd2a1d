"""The explicit registry: every detector class, in one tuple.

A test checks that the modules on disk and this tuple agree. There is no plugin system and no
import side effect: ``build`` makes fresh instances for one run.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from traindoc.detectors._protocol import Detector, Finishing, ObservingSeries, Stateful
from traindoc.detectors.bad_initial_loss import BadInitialLoss
from traindoc.detectors.bf16_master_weights import Bf16MasterWeights
from traindoc.detectors.checkpoint_incomplete import CheckpointIncomplete
from traindoc.detectors.clipping_every_step import ClippingEveryStep
from traindoc.detectors.constant_loss import ConstantLoss
from traindoc.detectors.dead_relu import DeadRelu
from traindoc.detectors.divergence import Divergence
from traindoc.detectors.exploding_gradients import ExplodingGradients
from traindoc.detectors.frozen_param_updated import FrozenParamUpdated
from traindoc.detectors.frozen_parameters import FrozenParameters
from traindoc.detectors.loss_spike import LossSpike
from traindoc.detectors.loss_term_imbalance import LossTermImbalance
from traindoc.detectors.lr_overridden_by_checkpoint import LrOverriddenByCheckpoint
from traindoc.detectors.masked_nonfinite import MaskedNonfinite
from traindoc.detectors.no_gradient import NoGradient
from traindoc.detectors.nonfinite import Nonfinite
from traindoc.detectors.optimizer_param_mismatch import OptimizerParamMismatch
from traindoc.detectors.repeated_batch import RepeatedBatch
from traindoc.detectors.saturated_outputs import SaturatedOutputs
from traindoc.detectors.stale_bn_eval import StaleBnEval
from traindoc.detectors.stalled_loss import StalledLoss
from traindoc.detectors.step_no_op import StepNoOp
from traindoc.detectors.tiny_updates import TinyUpdates
from traindoc.detectors.update_underflow import UpdateUnderflow
# logs face (metrics read from finished runs' logs)
from traindoc.detectors.degenerate_threshold import DegenerateThreshold
from traindoc.detectors.expert_collapse import ExpertCollapse
from traindoc.detectors.metric_divergence import MetricDivergence
from traindoc.detectors.metric_out_of_range import MetricOutOfRange
from traindoc.detectors.nan_hidden_by_logging import NanHiddenByLogging
from traindoc.detectors.scheduler_before_optimizer import SchedulerBeforeOptimizer
from traindoc.detectors.train_val_divergence import TrainValDivergence
from traindoc.detectors.val_at_chance import ValAtChance
# mixed precision and checkpoints (live)
from traindoc.detectors.autocast_bypassed import AutocastBypassed
from traindoc.detectors.checkpoint_not_atomic import CheckpointNotAtomic
from traindoc.detectors.clip_before_unscale import ClipBeforeUnscale
from traindoc.detectors.grad_scaler_collapse import GradScalerCollapse
# the training loop, evaluation and data (live)
from traindoc.detectors.data_starvation import DataStarvation
from traindoc.detectors.eval_in_train_mode import EvalInTrainMode
from traindoc.detectors.missing_zero_grad import MissingZeroGrad
from traindoc.detectors.nondeterministic_eval import NondeterministicEval
from traindoc.detectors.slow_eval import SlowEval
from traindoc.detectors.unscaled_grad_accumulation import UnscaledGradAccumulation
# several ranks (live, torch.distributed)
from traindoc.detectors.autograd_collective import AutogradCollective
from traindoc.detectors.rank_divergence import RankDivergence
from traindoc.detectors.rank_loss_skew import RankLossSkew
from traindoc.detectors.straggler_rank import StragglerRank
# built-in invariants (live)
from traindoc.detectors.batch_collapse import BatchCollapse
from traindoc.detectors.eval_before_train_forward import EvalBeforeTrainForward
from traindoc.detectors.repeated_init import RepeatedInit
from traindoc.detectors.schedule_unfinished import ScheduleUnfinished

__all__ = ["DETECTORS", "Detector", "Finishing", "ObservingSeries", "Stateful", "build", "by_id"]

# mypy checks each class against the Detector protocol here.
DETECTORS: tuple[type[Detector], ...] = (
    # gradients and updates
    Nonfinite,
    MaskedNonfinite,
    ConstantLoss,
    NoGradient,
    ExplodingGradients,
    ClippingEveryStep,
    UpdateUnderflow,
    TinyUpdates,
    FrozenParameters,
    FrozenParamUpdated,
    StepNoOp,
    OptimizerParamMismatch,
    DeadRelu,
    SaturatedOutputs,
    LossTermImbalance,
    # loss trajectory
    Divergence,
    LossSpike,
    StalledLoss,
    BadInitialLoss,
    # the training loop
    Bf16MasterWeights,
    RepeatedBatch,
    # checkpoints and resume
    CheckpointIncomplete,
    StaleBnEval,
    LrOverriddenByCheckpoint,
    # from metrics logs (logs face)
    NanHiddenByLogging,
    MetricDivergence,
    MetricOutOfRange,
    TrainValDivergence,
    ValAtChance,
    DegenerateThreshold,
    SchedulerBeforeOptimizer,
    ExpertCollapse,
    # mixed precision and checkpoints (live)
    GradScalerCollapse,
    ClipBeforeUnscale,
    AutocastBypassed,
    CheckpointNotAtomic,
    # the training loop, evaluation and data (live)
    UnscaledGradAccumulation,
    MissingZeroGrad,
    EvalInTrainMode,
    NondeterministicEval,
    SlowEval,
    DataStarvation,
    # built-in invariants (live)
    EvalBeforeTrainForward,
    BatchCollapse,
    ScheduleUnfinished,
    RepeatedInit,
    # several ranks (live, torch.distributed)
    RankDivergence,
    AutogradCollective,
    StragglerRank,
    RankLossSkew,
)


def build(
    *,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] = (),
    config: Mapping[str, Mapping[str, object]] | None = None,
) -> list[Detector]:
    """Fresh detector instances. ``config`` maps an id to overrides of its Config fields."""
    config = config or {}
    chosen = set(select) if select is not None else None
    muted = set(ignore)
    out: list[Detector] = []
    for cls in DETECTORS:
        id_ = cls.id
        if id_ in muted or (chosen is not None and id_ not in chosen):
            continue
        overrides = dict(config.get(id_, {}))
        # Typed as a callable: mypy refuses to call the protocol class Detector.Config itself,
        # though each cls.Config is a concrete dataclass.
        make_config: Callable[..., Detector.Config] = cls.Config
        out.append(cls(make_config(**overrides)))
    return out


def by_id() -> dict[str, type[Detector]]:
    return {cls.id: cls for cls in DETECTORS}
