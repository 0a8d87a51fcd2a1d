"""Sparse click-through model seeded once before training: shuffle=True draws a new order every epoch.

The twin of recsys_reseeded_each_epoch.py with `set_seed(args.seed)` called once, before the
data and the model are built: the run is just as reproducible, and the RandomSampler's
permutation comes from a generator that moves on, so each epoch visits the impressions in a new
order.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from recsys_reseeded_each_epoch import main  # noqa: E402

if __name__ == "__main__":
    main(seed_once=True)
