"""MLflow runs read through MLflow's own client: a sweep logged with the real ``mlflow`` client
into a local file store, a SQLite database and a real ``mlflow server`` (SQLite backend) that
this module starts on 127.0.0.1 (a free port) and stops at the end. Each run gets its own
diagnosis (the planted failure, nothing on the healthy siblings); runs are chosen by
experiment, run id or a search_runs filter."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

import fleet_sweeps as fs
from traindoc.cli import main

SERVER_BOOT_S = 150  # a busy 2-core machine takes 30-60 s to import and start the server


def _log_sweep(uri: str, experiment: str, runs: dict[str, tuple[fs.Run, set[str]]]) -> dict[str, str]:
    """Log ``runs`` with MLflow's client; returns {run name: run id}."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
    ids = {}
    for name, (run, expect) in runs.items():
        r = client.create_run(exp_id, run_name=name)
        metrics = [Metric(k, v, 1_700_000_000_000 + s, s) for k, points in run.items() for s, v in points]
        params = [Param("kind", "planted" if expect else "healthy")]
        for i in range(0, len(metrics), 1000):  # log_batch takes 1000 metrics at most
            client.log_batch(r.info.run_id, metrics=metrics[i:i + 1000], params=params if i == 0 else [])
        client.set_terminated(r.info.run_id)
        ids[name] = r.info.run_id
    return ids


def _read(target: str, tmp: Path, *options: str, code: int = 0) -> dict:  # type: ignore[type-arg]
    out = tmp / "fleet.json"
    assert main(["logs", target, "--json", str(out), *options]) == code
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _ids(doc: dict) -> dict[str, set[str]]:  # type: ignore[type-arg]
    return {r["name"]: {f["id"] for f in r["report"]["findings"]} for r in doc["runs"] if r["report"]}


EXPECT = {name: ids for name, (_, ids) in fs.sweep().items()}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``mlflow server`` on a free port, started now (it boots while the store tests run)."""
    pytest.importorskip("mlflow.server", reason="the tests need mlflow (full), in the dev extra")
    folder = tmp_path_factory.mktemp("server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = open(folder / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--default-artifact-root", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=folder)
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
        log.close()


def _wait_up(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + SERVER_BOOT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"mlflow server exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"mlflow server not up at {url} after {SERVER_BOOT_S} s")


def test_local_file_store(server: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses a file store without it
    _log_sweep(store.as_uri(), "sweep", fs.sweep())
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # the reader sets it for its read
    doc = _read(str(store), tmp_path)
    assert _ids(doc) == EXPECT
    assert {r["source"] for r in doc["runs"]} == {"mlflow"}
    assert all(len(r["id"]) == 32 for r in doc["runs"])  # MLflow's run ids
    healthy = next(r for r in doc["runs"] if r["name"] == "healthy-0")["report"]
    assert healthy["run"]["steps"] == fs.STEPS and healthy["run"]["logs"]["format"] == "mlflow"


def test_sqlite_by_experiment_filter_and_run_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ids = _log_sweep(db, "sweep", fs.sweep())
    _log_sweep(db, "other", {f"other-{i}": (fs.healthy(300 + i), set()) for i in range(2)})
    doc = _read(db, tmp_path, "--experiment", "sweep")
    assert _ids(doc) == EXPECT
    both = _read(db, tmp_path)  # every experiment: names carry the experiment's
    assert len(both["runs"]) == len(EXPECT) + 2 and "other/other-0" in _ids(both)
    planted = _read(db, tmp_path, "--experiment", "sweep", "--filter", "params.kind = 'planted'", code=0)
    assert set(_ids(planted)) == {n for n, e in EXPECT.items() if e}
    two = _read(db, tmp_path, "--run-id", ids["divergence"], "--run-id", ids["healthy-3"])
    assert _ids(two) == {"divergence": {"divergence"}, "healthy-3": set()}
    # mlflow.log_metric without step= puts every point at step 0: numbered in time order.
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=db)
    run = client.create_run(client.create_experiment("nostep"), run_name="nostep")
    client.log_batch(run.info.run_id, [Metric("loss", v, 1_700_000_000_000 + s, 0)  # what step=None logs
                                       for s, v in fs.PLANTED["divergence"](fs.healthy(7))["loss"]])
    nostep = _read(db, tmp_path, "--experiment", "nostep")["runs"][0]["report"]
    assert [f["id"] for f in nostep["findings"]] == ["divergence"] and nostep["run"]["steps"] == fs.STEPS
    assert "logged without a step" in nostep["run"]["logs"]["notes"][0]
    capsys.readouterr()
    assert main(["logs", db, "--experiment", "swep"]) == 2
    assert "no experiment named 'swep'" in capsys.readouterr().err


def test_tracking_server(server: tuple[subprocess.Popen[bytes], str], tmp_path: Path) -> None:
    proc, url = server
    _wait_up(proc, url)
    ids = _log_sweep(url, "sweep", fs.sweep())
    doc = _read(url, tmp_path, "--experiment", "sweep", "--fail-on", "error", code=3)
    assert _ids(doc) == EXPECT
    assert {r["name"]: r["id"] for r in doc["runs"]} == ids
    one = _read(url, tmp_path, "--run-id", ids["stalled-loss"])
    assert _ids(one) == {"stalled-loss": {"stalled-loss"}}


def test_retries_what_may_pass_and_no_more(monkeypatch: pytest.MonkeyPatch) -> None:
    from traindoc.errors import UsageError
    from traindoc.sources.fleet import mlflow_runs

    monkeypatch.setattr(mlflow_runs, "RETRY_WAITS", (0.0, 0.0))
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("Connection refused")
        return "ok"

    assert mlflow_runs._retry("server", flaky) == "ok" and len(calls) == 3
    calls.clear()

    def bad_request() -> str:
        calls.append(1)
        raise ValueError("INVALID_PARAMETER_VALUE: bad filter")

    with pytest.raises(UsageError, match="server: INVALID_PARAMETER_VALUE: bad filter"):
        mlflow_runs._retry("server", bad_request)
    assert len(calls) == 1  # a mistake is not retried


def test_a_server_that_does_not_answer_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from traindoc.sources.fleet import mlflow_runs

    monkeypatch.setattr(mlflow_runs, "RETRY_WAITS", (0.0, 0.0))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    t = time.monotonic()
    assert main(["logs", f"http://127.0.0.1:{port}", "--experiment", "sweep"]) == 2
    assert time.monotonic() - t < 60
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"Error: MLflow at http://127.0.0.1:{port}: no answer (connection refused, tried 3 times); "
                   "is the tracking server running there?"]
