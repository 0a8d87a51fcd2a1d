"""nondeterministic-eval: in eval mode, two forward passes on the same input differ."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt
from traindoc.events import Event, EvalPass
from traindoc.findings import Finding


class NondeterministicEval(Detector):
    """On the first forward of an evaluation phase with the whole model in eval mode, live
    traindoc ran the forward a second time on the same input (RNG state and buffers restored
    afterwards) and compared the outputs. Fires when they differ by more than ``tolerance``
    relative to the output's largest magnitude: a random op ignores ``model.eval()``. Differences
    of nondeterministic GPU kernels (about 1e-6 relative) stay below the tolerance. A model whose
    only random ops are draws from a distribution it predicts (``sampled``: inside a
    ``torch.distributions`` distribution, a stochastic policy acting; or a draw multiplied by a
    tensor the model computed, a VAE's ``mu + torch.randn_like(std) * std``) differs on purpose
    and is not judged. Noise of a fixed scale (``x + 0.3 * torch.randn_like(x)``) is judged."""

    id = "nondeterministic-eval"
    needs = frozenset({"eval"})
    examples = (
        Example("zoo/nondeterministic_eval.py", 29),
        Example("zoo/noise_layer_not_gated_eval.py", 15),
        Example("zoo/healthy_cnn_bn.py", None),
        Example("zoo/healthy_vae_sampled_eval.py", None),
        Example("zoo/healthy_cvae_inplace_sampling.py", None),
        Example("live/golden/nondeterministic_eval.jsonl", 29),
        Example("live/golden/healthy_eval.jsonl", None),
    )

    # Carried over a resume: the evaluations checked and whether it fired.
    carry = ("_checked", "_fired")

    @dataclass(frozen=True)
    class Config:
        tolerance: float = 1e-4  # relative difference between the two passes

        def __post_init__(self) -> None:
            if not self.tolerance > 0:
                raise ValueError(f"tolerance must be > 0, got {self.tolerance}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._checked = 0
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, EvalPass)
        if math.isnan(event.rerun) or event.sampled:
            return
        self._checked += 1
        if self._fired or not event.rerun > self.config.tolerance:
            return
        self._fired = True
        yield self._finding(event)

    def _finding(self, e: EvalPass) -> Finding:
        where = f" (evaluated at {e.where})" if e.where else ""
        name = e.first_diff.split(" (")[0]
        parent = f" of {name.rsplit('.', 1)[0]}" if "." in name else ""
        first = (f" The first module whose output differed is {e.first_diff}: the random op runs "
                 f"in it or in the forward code{parent} just before it." if e.first_diff else "")
        return finding(
            self.id, step=e.step,
            message=(
                f"in eval mode, two forward passes of {e.model} on the same input differ by "
                f"{fmt(e.rerun_abs)} ({fmt(e.rerun)} of the output's largest magnitude; tolerance "
                f"{fmt(self.config.tolerance)}) at the evaluation after step {e.step}{where}.{first}"
            ),
            evidence={"model": e.model, "relative_difference": e.rerun, "absolute_difference": e.rerun_abs,
                      "tolerance": self.config.tolerance, "first_differing_module": e.first_diff,
                      "evaluations_checked": self._checked},
            where=[w for w in (e.where, e.first_diff) if w],
        )
