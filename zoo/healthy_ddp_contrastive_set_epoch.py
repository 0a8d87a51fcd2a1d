"""Two-process SimCLR-style contrastive pretraining that calls set_epoch(): every epoch reshuffles.

The twin of ddp_contrastive_no_set_epoch.py with `train_sampler.set_epoch(epoch)` at the start
of every epoch: the DistributedSampler shuffles with `seed + epoch`, so each epoch visits the
samples in a new order on every rank (still one disjoint half per rank). Two gloo CPU ranks,
torchrun style; with plain `python` it spawns its two ranks itself.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddp_contrastive_no_set_epoch import main  # noqa: E402

if __name__ == "__main__":
    main(set_epoch=True)
