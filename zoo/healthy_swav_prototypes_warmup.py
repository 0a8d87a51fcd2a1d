"""The twin of `swav_prototypes_never_unfrozen.py` with the prototypes' warm-up counted in global
iterations (``epoch * len(loader) + it``), as SwAV counts it: their gradient is removed for the
first 20 iterations, and they train from the 21st on. The same network, loss and loop. Must
stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from swav_prototypes_never_unfrozen import main  # noqa: E402

if __name__ == "__main__":
    main(global_iteration=True)
