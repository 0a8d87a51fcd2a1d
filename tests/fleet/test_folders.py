"""`traindoc logs FOLDER` on a folder of runs: one diagnosis per run, the fleet view, --json,
--fail-on, --html, unreadable runs. Sweeps written as CSV files, as TensorBoard runs by torch's
own SummaryWriter (a nested sweep, one run with add_scalars children), as Lightning's
version_* folders and as Hugging Face output_dirs with checkpoint-*/trainer_state.json."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import jsonschema
import pytest

import fleet_sweeps as fs
from traindoc.cli import main
from traindoc.report import json as json_report


def _fleet(path: Path, tmp: Path, *options: str, code: int = 0) -> dict:  # type: ignore[type-arg]
    out = tmp / "fleet.json"
    assert main(["logs", str(path), "--json", str(out), *options]) == code
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _ids(doc: dict) -> dict[str, set[str]]:  # type: ignore[type-arg]
    return {r["name"]: {f["id"] for f in r["report"]["findings"]} for r in doc["runs"] if r["report"]}


@pytest.fixture(scope="module")
def csv_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, set[str]]]:
    root = tmp_path_factory.mktemp("csv") / "runs"
    root.mkdir()
    expect = {}
    for name, (run, ids) in fs.sweep().items():
        (root / f"{name}.csv").write_text(fs.csv_text(run))
        expect[f"{name}.csv"] = ids
    return root, expect


def test_csv_sweep_one_diagnosis_per_run(csv_sweep: tuple[Path, dict[str, set[str]]], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    root, expect = csv_sweep
    doc = _fleet(root, tmp_path)
    assert _ids(doc) == expect  # every planted failure found, nothing on the healthy siblings
    by_name = {r["name"]: r for r in doc["runs"]}
    assert by_name["divergence.csv"]["id"] == "divergence.csv" and by_name["divergence.csv"]["source"] == "csv"
    assert by_name["healthy-0.csv"]["report"]["run"]["steps"] == fs.STEPS
    summary = doc["fleet"]
    assert summary["runs"] == len(expect) and summary["unreadable"] == 0
    assert summary["healthy"] == fs.HEALTHY_SEEDS
    assert summary["failure_ids"]["sibling-outlier"] == 2 and summary["failure_ids"]["divergence"] == 1
    # The sibling evidence quotes the siblings' median at the step.
    slow = by_name["slow.csv"]["report"]["findings"][0]
    assert slow["evidence"]["signal"] == "loss" and slow["evidence"]["siblings"] >= 5
    assert slow["evidence"]["ratio"] >= 3 and "median of its" in slow["message"]
    schema = json_report.schema()  # each run's report is the single-run report
    for r in doc["runs"]:
        jsonschema.validate(r["report"], schema)
    err = capsys.readouterr().err
    table = err[err.index("traindoc fleet:"):].splitlines()
    assert table[0].endswith(f"{len(expect)} runs, {fs.HEALTHY_SEEDS} without findings, "
                             f"{len(expect) - fs.HEALTHY_SEEDS} with findings, 0 unreadable")
    rows = table[2:-1]
    assert len(rows) == len(expect)
    rank = {"error": 0, "warning": 1, "info": 2, "-": 3}
    worst = [rank[r.split()[2]] for r in rows]
    assert worst == sorted(worst) and worst[0] == 0 and worst.count(3) == fs.HEALTHY_SEEDS  # worst first
    assert table[-1].startswith("failure ids: sibling-outlier 2 runs")
    # Each run with findings got the single-run report before the view.
    assert "traindoc report: " + str(root / "divergence.csv") in err


def test_ignore_and_select_reach_the_sibling_comparison(csv_sweep: tuple[Path, dict[str, set[str]]],
                                                        tmp_path: Path) -> None:
    root, expect = csv_sweep
    quiet = _ids(_fleet(root, tmp_path, "--ignore", "sibling-outlier"))
    assert quiet == {n: ids - {"sibling-outlier"} for n, ids in expect.items()}
    # Alone, the comparison also names the runs whose loss or gradient norm the detectors
    # would have explained: a divergence, a stall, exploding gradients.
    only = {n: ids for n, ids in _ids(_fleet(root, tmp_path, "--select", "sibling-outlier")).items() if ids}
    assert only == {n: {"sibling-outlier"} for n in ("slow.csv", "tiny-grads.csv", "divergence.csv",
                                                     "stalled-loss.csv", "exploding-gradients.csv")}


def test_fail_on_and_a_run_that_cannot_be_read(csv_sweep: tuple[Path, dict[str, set[str]]],
                                               tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    for name in ("healthy-0", "healthy-1", "divergence"):
        (root / f"{name}.csv").write_text((csv_sweep[0] / f"{name}.csv").read_text())
    (root / "broken.csv").write_text("")
    doc = _fleet(root, tmp_path, "--fail-on", "error", code=3)
    broken = next(r for r in doc["runs"] if r["name"] == "broken.csv")
    assert broken["report"] is None and "is empty" in broken["error"]
    assert _ids(doc) == {"healthy-0.csv": set(), "healthy-1.csv": set(), "divergence.csv": {"divergence"}}
    assert "broken.csv" in capsys.readouterr().err
    (root / "divergence.csv").unlink()
    assert main(["logs", str(root), "--fail-on", "warning"]) == 0


def test_a_run_that_kills_its_worker_is_named(csv_sweep: tuple[Path, dict[str, set[str]]], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that takes its process down (out of memory, a crash in C) costs that run only."""
    from traindoc.sources import fleet

    load = fleet._load

    def dies_on_divergence(ref: fleet.RunRef, overrides: dict[str, str]) -> object:
        if ref.name == "divergence.csv":
            os._exit(1)
        return load(ref, overrides)

    monkeypatch.setattr(fleet, "_load", dies_on_divergence)  # forked workers inherit it
    root, expect = csv_sweep
    doc = _fleet(root, tmp_path, "--jobs", "2", "--ignore", "sibling-outlier")
    dead = [r for r in doc["runs"] if r["error"]]
    assert [r["name"] for r in dead] == ["divergence.csv"] and "process reading it died" in dead[0]["error"]
    assert _ids(doc) == {n: ids - {"sibling-outlier"} for n, ids in expect.items() if n != "divergence.csv"}


def test_html_index_links_each_run(csv_sweep: tuple[Path, dict[str, set[str]]], tmp_path: Path) -> None:
    root, expect = csv_sweep
    out = tmp_path / "fleet.html"
    assert main(["logs", str(root), "--html", str(out)]) == 0
    page = out.read_text()
    assert page.count("<section class='run' id='run-") == len(expect)
    for i in range(len(expect)):
        assert f"href='#run-{i}'" in page and f"id='run-{i}'" in page
    assert page.count("<html") == 1 and page.count("</body>") == 1
    assert "data-id='divergence'" in page  # the single-run renderer's finding sections


def _write_tb(folder: Path, run: fs.Run, children: bool = False) -> None:
    from torch.utils.tensorboard import SummaryWriter

    names = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
             "val_loss": "val/loss", "val_acc": "val/acc", "val_f1": "val/f1"}
    w = SummaryWriter(log_dir=str(folder))
    for signal, points in run.items():
        if children and signal == "val_loss":
            continue
        for s, v in points:
            w.add_scalar(names[signal], v, s)
    if children:  # add_scalars writes each curve into a folder of its own
        for s, v in run["val_loss"]:
            w.add_scalars("Loss", {"val": v}, s)
    w.close()


@pytest.fixture(scope="module")
def tb_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, set[str]]]:
    pytest.importorskip("tensorboard")
    root = tmp_path_factory.mktemp("tb") / "runs"
    expect = {}
    for i, (name, (run, ids)) in enumerate(fs.sweep().items()):
        lr = "lr_3e-4" if i % 2 else "lr_1e-3"  # a nested sweep: runs/<lr>/<run>/
        _write_tb(root / lr / name, run, children=name == "healthy-1")
        expect[f"{lr}/{name}"] = ids
    return root, expect


def test_tensorboard_nested_sweep(tb_sweep: tuple[Path, dict[str, set[str]]], tmp_path: Path) -> None:
    root, expect = tb_sweep
    doc = _fleet(root, tmp_path, "--num-classes", "10")
    assert _ids(doc) == expect
    assert {r["source"] for r in doc["runs"]} == {"tensorboard"}
    child = next(r for r in doc["runs"] if r["name"].endswith("healthy-1"))
    assert "Loss_val" in child["report"]["run"]["logs"]["mapping"].values()  # add_scalars' folder read with its run


def test_lightning_versions_and_hf_output_dirs(tmp_path: Path) -> None:
    root = tmp_path / "sweep"
    runs = fs.sweep(planted=("divergence", "stalled-loss"), outliers=False)
    expect = {}
    for i, (name, (run, ids)) in enumerate(runs.items()):
        if i % 2:  # Lightning's CSVLogger: lightning_logs/version_N/metrics.csv
            folder = root / "lightning_logs" / f"version_{i}"
            folder.mkdir(parents=True)
            (folder / "metrics.csv").write_text(fs.csv_text(run).replace("loss,", "train_loss_step,", 1))
            (folder / "hparams.yaml").write_text("lr: 0.001\n")
            expect[f"lightning_logs/version_{i}"] = ids
        else:  # Hugging Face: output_dir/checkpoint-*/trainer_state.json, each the history so far
            out = root / "hf" / name
            for ckpt in (100, fs.STEPS):
                history = [{"step": s + 1, "loss": v} for s, v in run["loss"] if s < ckpt]
                history += [{"step": s + 1, "eval_loss": v} for s, v in run["val_loss"] if s < ckpt]
                (out / f"checkpoint-{ckpt}").mkdir(parents=True)
                (out / f"checkpoint-{ckpt}" / "trainer_state.json").write_text(
                    json.dumps({"global_step": ckpt, "log_history": history}))
            expect[f"hf/{name}"] = ids
    doc = _fleet(root, tmp_path)
    assert _ids(doc) == expect
    hf = next(r for r in doc["runs"] if r["name"] == "hf/healthy-0")
    assert hf["source"] == "trainer_state" and hf["report"]["run"]["logs"]["files"][0].endswith(
        f"checkpoint-{fs.STEPS}/trainer_state.json")


def test_jsonl_runs(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    root.mkdir()
    runs = fs.sweep(planted=("divergence", "val-at-chance"), outliers=False)
    for name, (run, _) in runs.items():
        rows: dict[int, dict[str, float]] = {}
        for signal, points in run.items():
            for s, v in points:
                rows.setdefault(s, {"step": s})["train/" + signal if signal in ("loss", "lr", "grad_norm")
                                                 else signal.replace("val_", "val/")] = v
        (root / f"{name}.jsonl").write_text("".join(json.dumps(rows[s]) + "\n" for s in sorted(rows)))
    doc = _fleet(root, tmp_path)
    assert _ids(doc) == {f"{n}.jsonl": ids for n, (_, ids) in runs.items()}
    assert {r["source"] for r in doc["runs"]} == {"jsonl"}


def test_one_run_in_a_folder_is_the_single_run_report(csv_sweep: tuple[Path, dict[str, set[str]]],
                                                      tmp_path: Path) -> None:
    folder = tmp_path / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text((csv_sweep[0] / "divergence.csv").read_text())
    out = tmp_path / "one.json"
    assert main(["logs", str(tmp_path / "lightning_logs"), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert "runs" not in doc and [f["id"] for f in doc["findings"]] == ["divergence"]


def test_no_sibling_alarm_on_a_healthy_sweep_with_spread(tmp_path: Path) -> None:
    """40 healthy seeds, learning rates 2x apart in four groups: nothing is an outlier."""
    root = tmp_path / "runs"
    root.mkdir()
    for seed in range(40):
        run = fs.healthy(seed)
        scale = 2.0 ** (seed % 4 - 1.5)  # the LR groups train at their own speed
        run["loss"] = [(s, v * (1 + 0.15 * (scale - 1) * math.exp(-s / 150))) for s, v in run["loss"]]
        run["grad_norm"] = [(s, v * scale) for s, v in run["grad_norm"]]
        (root / f"seed{seed}.csv").write_text(fs.csv_text(run))
    doc = _fleet(root, tmp_path)
    assert doc["fleet"]["with_findings"] == 0, doc["fleet"]


def test_run_names_are_escaped_in_every_output(csv_sweep: tuple[Path, dict[str, set[str]]], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    text = (csv_sweep[0] / "divergence.csv").read_text()
    for name in ("\x1b[2Jclear.csv", "<img src=x onerror=alert(1)>.csv"):
        (root / name).write_text(text)
    html = tmp_path / "fleet.html"
    doc = _fleet(root, tmp_path, "--html", str(html))
    assert {r["name"] for r in doc["runs"]} == {"\x1b[2Jclear.csv", "<img src=x onerror=alert(1)>.csv"}
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2Jclear.csv" in err
    page = html.read_text()
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;.csv" in page


def test_no_sibling_alarm_near_a_converged_loss(tmp_path: Path) -> None:
    """Losses that fall to ~0: one seed ends at 2e-3 against its siblings' 1e-4 to 1.4e-4 (15x,
    but 0.1 % of where they started): quiet. The same seed stuck at 0.5 is not."""
    root = tmp_path / "runs"
    root.mkdir()
    for seed in range(12):
        run = fs.healthy(seed)
        floor = 2e-3 if seed == 0 else 1e-4 * (1 + 0.1 * (seed % 5))
        run["loss"] = [(s, 2.2 * math.exp(-s / 20) * (1 + 0.01 * math.sin(seed + s)) + floor) for s, _ in run["loss"]]
        (root / f"seed{seed}.csv").write_text(fs.csv_text(run))
    assert _fleet(root, tmp_path)["fleet"]["with_findings"] == 0
    run = fs.healthy(0)
    run["loss"] = [(s, 2.2 * math.exp(-s / 20) + 0.5) for s, _ in run["loss"]]
    (root / "seed0.csv").write_text(fs.csv_text(run))
    assert _ids(_fleet(root, tmp_path))["seed0.csv"] == {"sibling-outlier"}
