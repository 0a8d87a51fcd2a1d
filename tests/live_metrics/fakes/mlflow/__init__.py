"""A tiny stand-in for mlflow: fluent ``log_metric``/``log_metrics`` that go through the
client, as the real package's do."""

from mlflow.tracking.fluent import log_metric, log_metrics  # noqa: F401
from mlflow.tracking.client import MlflowClient  # noqa: F401
