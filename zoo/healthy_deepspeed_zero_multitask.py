"""The twin of `deepspeed_zero_aux_head_detached.py` with the auxiliary head's input detached
(``self.length_head(pooled.detach())``): the head learns from its own loss and the encoder is
left alone, as meant. The same DeepSpeed ZeRO-2 engine and loop. Must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from deepspeed_zero_aux_head_detached import main  # noqa: E402

if __name__ == "__main__":
    main(fixed=True)
