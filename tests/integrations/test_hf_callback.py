"""traindoc.hf.TraindocCallback on a real Trainer (tests/integrations/hf_train.py: a tiny GPT-2
built in code, CPU, nothing downloaded): a clean run reports nothing; each planted failure is
reported with the same ids that `traindoc run` reports for the same script without the
callback; fail_on raises at the end; the trackers (W&B offline, a local MLflow file store,
TensorBoard) receive the finding when it fires and the report at the end."""

from __future__ import annotations

import glob
import importlib.util
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENV

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed (pip install -e '.[dev]')")

SCRIPT = Path(__file__).with_name("hf_train.py")
RUN_ENV = {**ENV, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "WANDB_MODE": "offline", "WANDB_SILENT": "true", "MLFLOW_ALLOW_FILE_STORE": "true"}


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          env={**RUN_ENV, **(env or {})}, timeout=300)


def alarms(path: Path) -> set[str]:
    data = json.loads(path.read_text())
    assert data["disabled"] == [], data["disabled"]
    return {f["id"] for f in data["findings"] if f["severity"] in ("error", "warning")}


def with_callback(tmp_path: Path, *args: str) -> set[str]:
    ran = run([str(SCRIPT), *args, "--callback", "cb.json"], tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return alarms(tmp_path / "cb.json")


def under_run(tmp_path: Path, *args: str) -> set[str]:
    ran = run(["-m", "traindoc", "run", "--json", "run.json", str(SCRIPT), *args], tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return alarms(tmp_path / "run.json")


@pytest.mark.parametrize("args", [(), ("--grad-accum", "4", "--steps", "20")], ids=["clean", "grad-accum"])
def test_clean_run_reports_nothing(args: tuple[str, ...], tmp_path: Path) -> None:
    # grad-accum: Trainer divides by num_items_in_batch, not by the accumulation steps; that
    # must not read as unscaled accumulation.
    assert with_callback(tmp_path, *args) == set()


@pytest.mark.parametrize("bug, expected", [
    ("tiny_lr", {"tiny-updates"}),
    ("unfreeze_late", {"optimizer-param-mismatch"}),
    ("nan_labels", {"nonfinite"}),  # Trainer's logging_nan_inf_filter keeps it out of the logs
])
def test_planted_failure_same_ids_as_traindoc_run(bug: str, expected: set[str], tmp_path: Path) -> None:
    found = with_callback(tmp_path, "--bug", bug)
    assert expected <= found
    assert found == under_run(tmp_path, "--bug", bug)


def test_fail_on_raises_when_training_ends(tmp_path: Path) -> None:
    ran = run([str(SCRIPT), "--bug", "tiny_lr", "--steps", "20", "--callback", "cb.json", "--fail-on", "warning"], tmp_path)
    assert ran.returncode == 1
    assert "TrainingFindings: traindoc: 1 finding(s) at or above warning: tiny-updates" in ran.stderr
    assert alarms(tmp_path / "cb.json") == {"tiny-updates"}  # the report is written first


def _wandb_records(path: str) -> list[bytes]:
    """The records of a W&B transaction log (.wandb: a LevelDB-style log of 32 KiB blocks, each
    record split into chunks of type full=1, first=2, middle=3, last=4 after a 7-byte header)."""
    data = Path(path).read_bytes()
    pos, block, out, buf = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            out.append(buf + chunk)
    return out


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("wandb", "mlflow", "tensorboard")),
                    reason="wandb, mlflow and tensorboard are dev extras")
def test_trackers_receive_findings_and_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"WANDB_DIR": str(tmp_path), "MLFLOW_TRACKING_URI": (tmp_path / "mlruns").as_uri(),
           "TENSORBOARD_LOGGING_DIR": str(tmp_path / "tb")}
    ran = run([str(SCRIPT), "--bug", "tiny_lr", "--steps", "20", "--callback", "cb.json",
               "--report-to", "wandb,mlflow,tensorboard", "--export", "wandb,mlflow,tensorboard"], tmp_path, env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "could not send" not in ran.stderr

    # W&B (offline): an alert at the mapped level, the findings table and the report artifact.
    from wandb.proto import wandb_internal_pb2 as pb

    records = []
    for raw in _wandb_records(glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))[0]):
        record = pb.Record()
        record.ParseFromString(raw)
        records.append(record)
    alerts = [(r.alert.title, r.alert.level) for r in records if r.WhichOneof("record_type") == "alert"]
    assert alerts == [("traindoc: tiny-updates", "WARN")]
    assert ("traindoc-report", "traindoc-report") in [
        (r.artifact.name, r.artifact.type) for r in records if r.WhichOneof("record_type") == "artifact"]
    table = json.loads(Path(glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "files" / "media" / "table"
                                          / "traindoc" / "findings_*.table.json"))[0]).read_text())
    assert table["columns"] == ["step", "severity", "id", "message"]
    assert [row[2] for row in table["data"]] == ["tiny-updates"]

    # MLflow (a local file store): a tag per finding, the findings and the report as artifacts.
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps file stores behind this
    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    [mlrun] = client.search_runs(experiment_ids=["0"])
    assert mlrun.data.tags["traindoc.tiny-updates"].startswith("[warning] tiny-updates at step 0: ")
    artifacts = Path(mlrun.info.artifact_uri.removeprefix("file://")) / "traindoc"
    assert [f["id"] for f in json.loads((artifacts / "findings.json").read_text())["findings"]] == ["tiny-updates"]
    assert json.loads((artifacts / "report.json").read_text()) == json.loads((tmp_path / "cb.json").read_text())

    # TensorBoard: the finding and the report as text, read back from the event files.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    texts = {}
    for events in glob.glob(str(tmp_path / "tb" / "events.out.tfevents.*")):
        acc = EventAccumulator(events, size_guidance={"tensors": 0})
        acc.Reload()
        for tag in acc.Tags()["tensors"]:
            texts[tag.removesuffix("/text_summary")] = [e.tensor_proto.string_val[0].decode() for e in acc.Tensors(tag)]
    assert "traindoc/findings" in texts and "`tiny-updates`" in texts["traindoc/findings"][0]
    assert "tiny-updates" in texts["traindoc/report"][0]
