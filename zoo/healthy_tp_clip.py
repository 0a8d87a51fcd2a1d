"""Healthy tensor parallelism with hand-written global-norm clipping that sums every rank's shards.

The twin of tp_clip_local_norm.py with the all-reduce in place: the squared norm of the
sharded gradients is summed over the tensor-parallel group, so every rank computes the same
global norm and scales its gradients by the same factor, and the replicated LayerNorm and head
stay identical on both ranks while their shards differ by design. Run it with
`torchrun --nproc_per_node 2 healthy_tp_clip.py`; with plain `python` it spawns its two ranks
itself.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tp_clip_local_norm import main  # noqa: E402

if __name__ == "__main__":
    main(shards_summed=True)
