"""Framework callbacks (Hugging Face Trainer, Lightning), the pytest plugin and tracker export: thin producers of the live events."""
