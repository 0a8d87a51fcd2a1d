logged: list[tuple] = []


class MlflowClient:
    def log_metric(self, run_id, key, value, timestamp=None, step=None):
        logged.append((key, value, step))
