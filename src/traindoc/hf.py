"""``traindoc.hf.TraindocCallback``: the Hugging Face Trainer callback
(``traindoc.integrations.hf``). Importing this module imports transformers; ``import traindoc``
does not."""

from traindoc.integrations.hf import TraindocCallback, TrainingFindings

__all__ = ["TraindocCallback", "TrainingFindings"]
