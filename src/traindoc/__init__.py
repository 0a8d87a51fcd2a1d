"""traindoc: a training doctor for PyTorch.

It watches a training run (or reads its logs, checkpoints or source), finds the failures that do
not crash, proves each with numbers measured in the run, and says the fix.

``torch`` is imported lazily: ``import traindoc`` is instant and works without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traindoc.version import __version__

if TYPE_CHECKING:
    # Type checkers see the class itself, so that a call is checked against Watch's own
    # parameters; at run time the function below imports it lazily (no torch on import).
    from traindoc.live.watch import Watch as watch
else:
    def watch(model=None, optimizer=None, **options):
        """Observe the training inside a ``with`` block (see ``traindoc.live.watch.Watch``)."""
        from traindoc.live.watch import Watch

        return Watch(model, optimizer, **options)

# One-line calls for what zero-code capture cannot see (traindoc/metrics.py: no torch import).
from traindoc.metrics import log, loss_terms, watch_router  # noqa: E402

if TYPE_CHECKING:
    from traindoc import hf, lightning
else:
    def __getattr__(name):
        """``traindoc.hf`` and ``traindoc.lightning`` (the framework callbacks) are imported on
        first use: each imports its framework, which ``import traindoc`` must not."""
        if name in ("hf", "lightning"):
            import importlib

            return importlib.import_module(f"traindoc.{name}")
        raise AttributeError(f"module 'traindoc' has no attribute {name!r}")

__all__ = ["__version__", "watch", "log", "loss_terms", "watch_router"]
