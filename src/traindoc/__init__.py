"""traindoc: a training doctor for PyTorch.

It watches a training run (or reads its logs, checkpoints or source), finds the failures that do
not crash, proves each with numbers measured in the run, and says the fix.

``torch`` is imported lazily: ``import traindoc`` is instant and works without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing only: `import traindoc` stays free of torch
    from traindoc.live.watch import Watch

__version__ = "0.1.0"


def watch(model: object = None, optimizer: object = None, **options: object) -> "Watch":
    """Observe the training inside a ``with`` block (see ``traindoc.live.watch.Watch``)."""
    from traindoc.live.watch import Watch

    return Watch(model, optimizer, **options)  # type: ignore[arg-type]

# One-line calls for what zero-code capture cannot see (traindoc/metrics.py: no torch import).
from traindoc.metrics import log, loss_terms, watch_router  # noqa: E402

__all__ = ["__version__", "watch", "log", "loss_terms", "watch_router"]
