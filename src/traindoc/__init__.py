"""traindoc: a training doctor for PyTorch.

It watches a training run (or reads its logs, checkpoints or source), finds the failures that do
not crash, proves each with numbers measured in the run, and says the fix.

``torch`` is imported lazily: ``import traindoc`` is instant and works without torch.
"""

from __future__ import annotations

__version__ = "0.1.0"
