"""Healthy torchtitan-style LM: mean token loss, clipping at 5.0 as a safety net.

The twin of `titan_sum_loss_clipped.py` with the loss as torchtitan computes it, the mean
cross-entropy over the tokens: the gradient norm is 2.5-3.5 here, under max_norm=5.0, so the
clip never cuts and the warmup schedule sets the step size.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from titan_sum_loss_clipped import TrainingConfig, main  # noqa: E402

if __name__ == "__main__":
    main(TrainingConfig(max_norm=5.0, loss_reduction="mean"))
