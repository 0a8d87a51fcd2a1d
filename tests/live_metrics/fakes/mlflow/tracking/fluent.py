from mlflow.tracking.client import MlflowClient


def log_metric(key, value, step=None):
    MlflowClient().log_metric("run0", key, value, step=step)


def log_metrics(metrics, step=None):
    for k, v in metrics.items():
        MlflowClient().log_metric("run0", k, v, step=step)
