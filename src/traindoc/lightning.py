"""``traindoc.lightning.TraindocCallback``: the Lightning callback
(``traindoc.integrations.lightning``). Importing this module imports Lightning; ``import traindoc``
does not."""

from traindoc.integrations.lightning import TraindocCallback, TrainingFindings

__all__ = ["TraindocCallback", "TrainingFindings"]
