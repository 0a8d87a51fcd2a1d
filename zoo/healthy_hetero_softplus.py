"""Heteroscedastic regressor with a softplus variance: the torch.where(isnan) guard replaces nothing.

The twin of hetero_where_isnan.py with `var = softplus(raw) + 1e-4` in the Gaussian head: the
variance is positive, `log` never returns NaN, and the `torch.where(torch.isnan(...))` the model
still applies to the log-variance keeps every value.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hetero_where_isnan import main  # noqa: E402

if __name__ == "__main__":
    main(softplus=True)
