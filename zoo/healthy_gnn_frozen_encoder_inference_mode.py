"""GCN node classifier on features precomputed under inference_mode by a frozen encoder: healthy twin.

The graph, split, loop and test() of gnn_encoder_under_inference_mode.py (after
pytorch_geometric's examples/gcn.py), with the first layer frozen on purpose: a pretrained
encoder whose parameters have requires_grad=False and are left out of the optimizer, so running
it under `@torch.inference_mode()` once per step is a speed-up, not a bug. `h.clone()` hands the
trainable second layer a normal tensor; only lin2 is optimized, and it learns.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gnn_encoder_under_inference_mode import main  # noqa: E402

if __name__ == "__main__":
    main(frozen_encoder=True)
