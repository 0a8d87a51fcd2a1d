"""Healthy DDP on per-rank data shards: each rank's loss is noisy, none is off.

The twin of ddp_rank_mislabeled_shard.py with every shard written correctly: the table is
split into one shard per rank (rows rank::world), each rank shuffles its own with its own
DataLoader, so at every step the ranks see different random batches of the same data and their
losses differ by batch noise only. Two gloo CPU ranks, torchrun style; with plain `python` it
spawns its two ranks itself.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddp_rank_mislabeled_shard import main  # noqa: E402

if __name__ == "__main__":
    main(fixed=True)
