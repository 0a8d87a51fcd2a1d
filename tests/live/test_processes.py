"""Training a script runs in processes of its own (``multiprocessing.Process``, Hogwild, an
ensemble one member per process) is followed: each child, spawned or forked, whose target is the
user's function, or whose class's run() is the user's, watches itself, and the parent's report
is theirs. Library processes (DataLoader workers) and children that never train are left alone.
The zoo holds the end-to-end cases (process_ensemble_no_zero_grad, healthy_process_ensemble,
a3c_local_grads_accumulate, healthy_a3c)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import traindoc

TIMEOUT = 240

_TRAIN = '''
import sys
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F


def fit(model, steps, zero):
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x = torch.randn(16, 4)
        loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
        if zero:
            opt.zero_grad()
        loss.backward()
        opt.step()


class Trainer(mp.Process):  # a worker class whose own run() trains (MorvanZhou's A3C Worker)
    def __init__(self, model, steps, zero):
        super().__init__()
        self.model, self.steps, self.zero = model, steps, zero

    def run(self):
        fit(self.model, self.steps, self.zero)


def fit_index(index, model, steps, zero):  # mp.spawn's function: the child's index first
    fit(model, steps, zero)


def idle(queue):
    queue.put(sum(range(10)))  # a producer process: no training


if __name__ == "__main__":
    method, what = sys.argv[1], sys.argv[2]
    ctx = mp.get_context(method)
    model = torch.nn.Linear(4, 1)
    model.share_memory()
    if what == "loader":  # the parent trains; its DataLoader's workers are spawned processes
        data = torch.utils.data.TensorDataset(torch.randn(64, 4))
        loader = torch.utils.data.DataLoader(data, batch_size=16, num_workers=1, multiprocessing_context=ctx)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for (x,) in loader:
            loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
        p = ctx.Process(target=print)  # a library function: not followed
        p.start()
        p.join()
    elif what == "idle":
        q = ctx.Queue()
        p = ctx.Process(target=idle, args=(q,))
        p.start()
        print("got", q.get())
        p.join()
        fit(model, 12, zero=True)  # the parent trains itself
    elif what == "start_processes":  # mp.spawn's machinery, with the start method given
        mp.start_processes(fit_index, args=(model, 12, False), nprocs=1, start_method=method)
        p = mp.get_context(method).Process(target=print)
        p.start()
        p.join()
    elif what.startswith("class"):
        if method != "default":
            mp.set_start_method(method)
        p = Trainer(model, 12, what == "class-healthy")
        p.start()
        p.join()
    else:
        p = ctx.Process(target=fit, args=(model, 12, what == "healthy"))
        p.start()
        p.join()
    print("exit", p.exitcode)
'''


def _run(tmp_path: Path, method: str, what: str) -> tuple[dict, str]:
    script, report = tmp_path / "procs.py", tmp_path / "r.json"
    script.write_text(_TRAIN)
    out = traindoc("run", "--json", str(report), str(script), method, what, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "exit 0" in out.stdout and "Traceback" not in out.stderr, out.stderr[-3000:]
    return json.loads(report.read_text()), out.stderr


def test_a_spawned_process_that_trains_is_followed(tmp_path: Path) -> None:
    data, err = _run(tmp_path, "spawn", "no_zero_grad")
    assert data["run"]["trained"] is True and data["run"]["steps"] == 12
    assert data["run"]["processes"] == 1 and data["run"]["ranks"] == 1
    assert [f["id"] for f in data["findings"] if f["severity"] == "error"] == ["missing-zero-grad"]
    assert err.count("traindoc report") == 1


def test_a_healthy_spawned_process_is_quiet(tmp_path: Path) -> None:
    data, _ = _run(tmp_path, "forkserver", "healthy")
    assert data["run"]["steps"] == 12
    assert [f["id"] for f in data["findings"] if f["severity"] in ("warning", "error")] == []


def test_a_process_that_never_trains_leaves_the_parents_report(tmp_path: Path) -> None:
    data, _ = _run(tmp_path, "spawn", "idle")
    assert data["run"]["steps"] == 12 and "processes" not in data["run"]


def test_dataloader_workers_are_not_followed(tmp_path: Path) -> None:
    data, _ = _run(tmp_path, "spawn", "loader")
    assert data["run"]["steps"] == 4 and "processes" not in data["run"]


def test_a_forked_process_is_followed(tmp_path: Path) -> None:
    # It starts as a copy of the parent, watch included: it takes the copy down, then watches itself.
    data, err = _run(tmp_path, "fork", "no_zero_grad")
    assert data["run"]["processes"] == 1 and data["run"]["steps"] == 12
    assert [f["id"] for f in data["findings"] if f["severity"] == "error"] == ["missing-zero-grad"]
    assert err.count("traindoc report") == 1 and "internal error" not in err
    healthy, _ = _run(tmp_path, "fork", "healthy")
    assert healthy["run"]["processes"] == 1
    assert [f["id"] for f in healthy["findings"] if f["severity"] in ("warning", "error")] == []


def test_a_process_subclass_whose_run_trains_is_followed(tmp_path: Path) -> None:
    data, _ = _run(tmp_path, "spawn", "class")
    assert data["run"]["processes"] == 1 and data["run"]["steps"] == 12
    assert [f["id"] for f in data["findings"] if f["severity"] == "error"] == ["missing-zero-grad"]
    healthy, _ = _run(tmp_path, "spawn", "class-healthy")
    assert healthy["run"]["processes"] == 1
    assert [f["id"] for f in healthy["findings"] if f["severity"] in ("warning", "error")] == []


def test_a_forked_process_subclass_is_followed(tmp_path: Path) -> None:
    data, _ = _run(tmp_path, "fork", "class")
    assert data["run"]["processes"] == 1
    assert [f["id"] for f in data["findings"] if f["severity"] == "error"] == ["missing-zero-grad"]


def test_mp_start_processes_with_fork_is_followed(tmp_path: Path) -> None:
    data, err = _run(tmp_path, "fork", "start_processes")
    assert data["run"]["steps"] == 12 and "internal error" not in err
    assert [f["id"] for f in data["findings"] if f["severity"] == "error"] == ["missing-zero-grad"]


def test_a_forked_child_writes_its_own_record_and_leaves_the_parents_whole(tmp_path: Path) -> None:
    """The child's copy of the parent's recorder shares the parent's file: it writes nothing."""
    script, rec = tmp_path / "procs.py", tmp_path / "rec.jsonl"
    script.write_text(_TRAIN)
    out = traindoc("run", "--record", str(rec), str(script), "fork", "no_zero_grad", timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    parent = [json.loads(line) for line in rec.read_text().splitlines()]
    child = [json.loads(line) for line in (tmp_path / "rec.rank0.jsonl").read_text().splitlines()]
    assert len(child) > len(parent) and all(e.get("step", 0) == 0 for e in parent)
