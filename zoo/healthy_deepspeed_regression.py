"""The twin of `deepspeed_unscaled_targets.py` with standardized targets: the same DeepSpeed
engine, config and ``gradient_clipping: 1.0``, and gradient norms near 1 that are rarely
clipped. Must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from deepspeed_unscaled_targets import main  # noqa: E402

if __name__ == "__main__":
    main(fixed=True)
