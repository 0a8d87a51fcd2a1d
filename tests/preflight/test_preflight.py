"""`traindoc preflight` end to end: each probe fails on a case made for it and passes on a
healthy one; the user's folders are left as they were; the CLI's errors and exit codes.

The cases of zoo/preflight/ carry their expectations in a ``preflight-expect:`` line
(``probe:pass|fail|n/a``); the zoo's own cases are paired with a probe below.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, traindoc

ZOO = ROOT / "zoo"
PREFLIGHT_ZOO = ZOO / "preflight"


def _expectations(path: Path) -> dict[str, str]:
    match = re.search(r"^preflight-expect:(.*)$", path.read_text(encoding="utf-8"), re.M)
    assert match, f"{path.name}: no preflight-expect line"
    return dict(token.split(":", 1) for token in match.group(1).split())


# (case, probe, verdict, finding id the failure must carry)
ZOO_CASES = [
    ("bad_init_scaled_head", "initial-loss", "fail", "bad-initial-loss"),
    ("healthy_mlp", "initial-loss", "pass", None),
    ("healthy_f1_threshold", "initial-loss", "pass", None),  # binary_cross_entropy_with_logits
    ("detached_branch", "gradients", "fail", "no-gradient"),
    ("nonfinite_grad", "gradients", "fail", "nonfinite"),
    ("healthy_mlp", "gradients", "pass", None),
    ("lr_zero_warmup", "overfit", "fail", "cannot-overfit-batch"),
    ("healthy_mlp", "overfit", "pass", None),
    ("healthy_gpt", "overfit", "pass", None),  # no DataLoader: random windows, the RNG rewound
    ("nondeterministic_eval", "eval", "fail", "nondeterministic-eval"),
    ("healthy_cnn_bn", "eval", "pass", None),
    ("healthy_f1_threshold", "overfit", "pass", None),  # batches drawn with the script's torch.Generator
    ("healthy_mlp", "lr", "pass", None),
]
PREFLIGHT_CASES = [(p.stem, probe, verdict) for p in sorted(PREFLIGHT_ZOO.glob("*.py"))
                   for probe, verdict in _expectations(p).items()]
FINDING_OF = {"initial-loss": "bad-initial-loss", "gradients": "no-gradient", "overfit": "cannot-overfit-batch",
              "eval": "nondeterministic-eval", "resume": "resume-mismatch", "lr": "lr-out-of-range"}


def preflight(tmp_path: Path, script: Path, *options: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    report = tmp_path / "pf.json"
    ran = traindoc("preflight", "--json", str(report), *options, str(script), cwd=tmp_path, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran, json.loads(report.read_text())


def verdict(data: dict, probe: str) -> dict:
    (found,) = [v for v in data["preflight"]["probes"] if v["probe"] == probe]
    return found


@pytest.mark.parametrize("name,probe,expected,id_", ZOO_CASES, ids=[f"{c[0]}-{c[1]}" for c in ZOO_CASES])
def test_zoo_case(name: str, probe: str, expected: str, id_: str | None, tmp_path: Path) -> None:
    ran, data = preflight(tmp_path, ZOO / f"{name}.py", "--only", probe)
    v = verdict(data, probe)
    assert v["status"] == expected, f"{name}: {v}\n{ran.stderr[-3000:]}"
    if id_:
        assert v["findings"] == [id_]
        (f,) = [f for f in data["findings"] if f["id"] == id_]
        assert f["evidence"] and f["cause"] and f["fix"] and f["message"]


@pytest.mark.parametrize("name,probe,expected", PREFLIGHT_CASES, ids=[f"{c[0]}-{c[1]}" for c in PREFLIGHT_CASES])
def test_preflight_case(name: str, probe: str, expected: str, tmp_path: Path) -> None:
    ran, data = preflight(tmp_path, PREFLIGHT_ZOO / f"{name}.py", "--only", probe)
    v = verdict(data, probe)
    assert v["status"] == expected, f"{name}: {v}\n{ran.stderr[-3000:]}"
    if expected == "fail":
        assert v["findings"] == [FINDING_OF[probe]]


def test_resume_names_what_was_not_restored(tmp_path: Path) -> None:
    _, no_rng = preflight(tmp_path, PREFLIGHT_ZOO / "resume_no_rng.py", "--only", "resume")
    (f,) = [f for f in no_rng["findings"] if f["id"] == "resume-mismatch"]
    assert "torch RNG state" in f["message"] and "LR scheduler" not in f["message"]
    assert f["evidence"]["saved_at_step"] == 10 and f["evidence"]["checkpoint"] == "out/last.pt"
    _, no_sched = preflight(tmp_path, PREFLIGHT_ZOO / "resume_no_scheduler.py", "--only", "resume")
    (g,) = [f for f in no_sched["findings"] if f["id"] == "resume-mismatch"]
    assert "LR scheduler (at step 0 instead of 10)" in g["message"] and "RNG" not in g["message"]


def test_a_script_that_does_not_checkpoint_gets_a_reason(tmp_path: Path) -> None:
    _, data = preflight(tmp_path, ZOO / "healthy_mlp.py", "--only", "resume")
    v = verdict(data, "resume")
    assert v["status"] == "n/a" and "no checkpoint" in v["summary"]


def test_whole_preflight_of_a_healthy_case_passes_within_a_minute(tmp_path: Path) -> None:
    ran, data = preflight(tmp_path, PREFLIGHT_ZOO / "healthy_resume.py", "--fail-on", "warning")
    statuses = {v["probe"]: v["status"] for v in data["preflight"]["probes"]}
    assert statuses == dict.fromkeys(("initial-loss", "gradients", "overfit", "eval", "resume", "lr"), "pass")
    assert data["preflight"]["seconds"] < 60
    assert data["findings"] == []
    assert "pass" in ran.stderr and ran.stdout == ""  # the script's own prints are kept out


SCRIBBLER = '''
import os, sys
import torch
import torch.nn as nn
import torch.nn.functional as F

out = sys.argv[1]  # an absolute folder of the user's, with a checkpoint in it already
model = nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
os.makedirs("runs", exist_ok=True)
log = open("runs/log.txt", "w")
for step in range(30):
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    log.write(f"{step} {loss.item()}\\n")
    torch.save(model.state_dict(), "ckpt.pt")
    torch.save(model.state_dict(), os.path.join(out, "last.pt.tmp"))
    os.replace(os.path.join(out, "last.pt.tmp"), os.path.join(out, "last.pt"))
    torch.save({"step": step}, os.path.join(out, "new.pt"))
'''


def test_the_users_folders_are_left_as_they_were(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    (work / "train.py").write_text(SCRIBBLER)
    (out / "last.pt").write_bytes(b"the user's real checkpoint")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    ran = traindoc("preflight", "train.py", str(out), cwd=work, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before
    assert f"put back the overwritten file(s) {out / 'last.pt'}" in ran.stderr


def test_fail_on_gives_exit_3(tmp_path: Path) -> None:
    ran = traindoc("preflight", "--only", "initial-loss", "--fail-on", "warning",
                   str(ZOO / "bad_init_scaled_head.py"), cwd=tmp_path, timeout=300)
    assert ran.returncode == 3, ran.stderr[-3000:]
    assert "initial-loss  fail" in ran.stderr


@pytest.mark.parametrize("args,message", [
    (("--only", "overfit,warp", "x.py"), "--only: unknown probe 'warp'"),
    (("missing.py",), "missing.py: no such file"),
    ((), "nothing to run"),
    (("--budget", "0", "x.py"), "--budget must be > 0"),
])
def test_usage_errors_are_one_line(args: tuple[str, ...], message: str, tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("print('hi')\n")
    ran = traindoc("preflight", *args, cwd=tmp_path)
    assert ran.returncode == 2
    assert ran.stderr.startswith("Error: ") and message in ran.stderr and "Traceback" not in ran.stderr


def test_a_script_that_crashes_gives_reasons_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\nraise ValueError('no data folder')\n")
    ran = traindoc("preflight", "train.py", cwd=tmp_path, timeout=120)
    assert "ValueError: no data folder (at train.py:2)" in ran.stderr
    assert "n/a" in ran.stderr
