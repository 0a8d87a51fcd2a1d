"""MLflow runs read through MLflow's own client (``pip install 'traindoc[mlflow]'``).

A tracking URI as MLflow takes it: a local store (``mlruns/``, which MLflow 3 opens only with
``MLFLOW_ALLOW_FILE_STORE=true``: set here for the read when the user has not set it), a
database (``sqlite:///mlflow.db``, or a ``.db`` file) or a tracking server
(``http://127.0.0.1:5000``). Runs are chosen by experiment name, run id or a ``search_runs``
filter string; each run's metrics arrive as their full histories, with their steps.

The parent lists the runs (``runs``); each worker fetches one run's histories (``load``), so
at most ``SERVER_JOBS`` runs are fetched from a server at once. A request that fails for a
reason that may pass (a timeout, a refused connection, a 5xx) is retried twice after 0.5 and
2 s; MLflow's own retries are cut to 2 with a 30 s timeout, so a dead server costs a minute,
not a quarter of an hour.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from traindoc.errors import UsageError
from traindoc.sources.fleet.discover import RunRef

if TYPE_CHECKING:
    from traindoc.sources.logs import Log

T = TypeVar("T")
RETRY_WAITS = (0.5, 2.0)
PAGE = 1000


def tracking_uri(target: str) -> str:
    """A path as MLflow's URI: ``mlruns/`` -> ``file:///abs/mlruns``, ``x.db`` -> sqlite."""
    if "://" in target or target.startswith(("file:", "databricks")):
        return target
    path = Path(target).resolve()
    if path.suffix == ".db":
        return f"sqlite:///{path}"
    return path.as_uri()


def _client(uri: str) -> Any:
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise UsageError("reading MLflow runs needs MLflow's client: pip install 'traindoc[mlflow]'") from None
    return MlflowClient(tracking_uri=uri)


def _retry(what: str, call: Callable[[], T]) -> T:
    """``call()``, again after a wait when it failed for a reason that may pass."""
    for wait in (*RETRY_WAITS, None):
        try:
            return call()
        except Exception as exc:
            if wait is None or not _transient(exc):
                raise UsageError(f"{what}: {_reason(exc)}") from None
            time.sleep(wait)
    raise AssertionError("unreachable")


def _transient(exc: Exception) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return any(w in text for w in ("timeout", "timed out", "connection", "temporarily", "503", "502",
                                   "504", "500", "429", "max retries", "database is locked"))


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    if "NewConnectionError" in text or "Connection refused" in text:
        return "no answer (connection refused, tried 3 times); is the tracking server running there?"
    return (text[:300] + "...") if len(text) > 300 else text or type(exc).__name__


def runs(target: str, *, experiments: Sequence[str] = (), run_ids: Sequence[str] = (),
         filter_string: str = "") -> list[RunRef]:
    """The runs at ``target`` that the selection names, in the tracker's order (newest first)."""
    uri = tracking_uri(target)
    client = _client(uri)
    where = f"MLflow at {target}"
    if run_ids:
        # Each lambda runs inside _retry, before the loop moves on: no late binding to fear.
        found = [_retry(f"{where}: run {rid}", lambda: client.get_run(rid)) for rid in run_ids]
        names = {r.info.experiment_id: "" for r in found}
        return _refs(uri, found, names)
    if experiments:
        exps = []
        for name in experiments:
            exp = _retry(where, lambda: client.get_experiment_by_name(name))
            if exp is None:
                known = [e.name for e in _retry(where, lambda: client.search_experiments())]
                raise UsageError(f"{where}: no experiment named {name!r}; it has {', '.join(map(repr, known[:10]))}")
            exps.append(exp)
    else:
        exps = _retry(where, lambda: client.search_experiments())
    if not exps:
        raise UsageError(f"{where}: no experiment found; is this the tracking URI your runs logged to?")
    names = {e.experiment_id: e.name for e in exps}
    found, token = [], None
    while True:
        page = _retry(where, lambda: client.search_runs(
            list(names), filter_string=filter_string, max_results=PAGE, page_token=token))
        found.extend(page)
        token = getattr(page, "token", None)
        if not token:
            break
    if not found:
        what = f" matching {filter_string!r}" if filter_string else ""
        raise UsageError(f"{where}: no run{what} in {', '.join(map(repr, names.values()))}")
    return _refs(uri, found, names)


def _refs(uri: str, found: list[Any], experiments: dict[str, str]) -> list[RunRef]:
    several = len(set(r.info.experiment_id for r in found)) > 1
    seen: dict[str, int] = {}
    out = []
    for r in found:
        name = r.info.run_name or r.info.run_id
        if several and experiments.get(r.info.experiment_id):
            name = f"{experiments[r.info.experiment_id]}/{name}"
        seen[name] = seen.get(name, 0) + 1
        out.append((name, r))
    refs = []
    for name, r in out:
        if seen[name] > 1:  # two runs of one name: tell them apart by their ids
            name = f"{name} ({r.info.run_id[:8]})"
        refs.append(RunRef(kind="mlflow", name=name, id=r.info.run_id, source="mlflow", uri=uri,
                           meta={"experiment": experiments.get(r.info.experiment_id, ""),
                                 "metrics": ",".join(sorted(r.data.metrics))}))
    return refs


def load(ref: RunRef, overrides: dict[str, str]) -> Log:
    """One run's metric histories as a log of the logs face."""
    from traindoc.sources import logs

    client = _client(ref.uri)
    keys = [k for k in ref.meta.get("metrics", "").split(",") if k]
    if not keys:
        raise UsageError(f"MLflow run {ref.id}: no metric logged")
    columns: dict[str, tuple[list[int], list[float]]] = {}
    unstepped = []
    for key in keys:
        history = _retry(f"MLflow run {ref.id}: metric {key}",
                         lambda: client.get_metric_history(ref.id, key))
        points = sorted((m.step, m.timestamp, m.value) for m in history)
        steps = [p[0] for p in points]
        if len(points) > 1 and steps[0] == steps[-1]:
            # mlflow.log_metric(key, value) without step= logs every point at step 0: their
            # order in time is the only order there is.
            steps = list(range(len(points)))
            unstepped.append(key)
        columns[key] = (steps, [float(p[2]) for p in points])
    log = logs.from_columns(columns, format="mlflow", overrides=overrides,
                            label=f"mlflow run {ref.name} ({ref.id})")
    if unstepped:
        log.table.notes.append(f"{', '.join(unstepped)}: logged without a step (every point at one "
                               "step); the points are numbered in the order they were logged")
    return log
