"""Radial normalizing flow with beta >= -alpha by construction: the nan_to_num guard never fires.

The twin of flow_logdet_nan_to_num.py with the paper's reparameterisation of each layer,
beta = -alpha + softplus(beta_raw): 1 + beta h stays positive, every log-determinant is
finite, and the `nan_to_num` the model still applies to the layers' log-determinants replaces
nothing.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from flow_logdet_nan_to_num import main  # noqa: E402

if __name__ == "__main__":
    main(constrained=True)
