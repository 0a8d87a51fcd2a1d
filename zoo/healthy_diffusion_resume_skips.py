"""Preemptible DDPM training that resumes where the interrupted epoch stopped: no batch twice.

The twin of diffusion_resume_restarts_epoch.py: the checkpoint also stores how many batches of
the epoch were consumed, and the resumed launch skips them with
`itertools.islice(loader, consumed, None)` (the skipped batches are drawn from the loader but
not trained on). The loader keeps the file's order (shuffle=False), so every epoch sees the
batches in the same order, by choice; each batch is trained on once per epoch.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from diffusion_resume_restarts_epoch import main  # noqa: E402

if __name__ == "__main__":
    main(skip_consumed=True)
