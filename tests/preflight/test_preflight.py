"""`traindoc preflight` end to end: each probe fails on a case made for it and passes on a
healthy one; the user's folders are left as they were; the CLI's errors and exit codes.

The cases of zoo/preflight/ carry their expectations in a ``preflight-expect:`` line
(``probe:pass|fail|n/a``, or ``probe:fail:id`` when the failure's id is not the probe's usual
one); the zoo's own cases are paired with a probe below. HF Trainer and Lightning scripts:
test_frameworks.py.
"""

from __future__ import annotations

import json
import math
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


def _verdict_and_id(expected: str, probe: str) -> tuple[str, str | None]:
    status, _, id_ = expected.partition(":")
    return status, (id_ or FINDING_OF[probe]) if status == "fail" else None


# (case, probe, verdict, finding id the failure must carry)
ZOO_CASES = [
    ("bad_init_scaled_head", "initial-loss", "fail", "bad-initial-loss"),
    ("healthy_mlp", "initial-loss", "pass", None),
    ("healthy_f1_threshold", "initial-loss", "pass", None),  # binary_cross_entropy_with_logits
    ("bad_init_gcn_log_softmax", "initial-loss", "fail", "bad-initial-loss"),  # nll_loss of log_softmax
    ("healthy_mnist_style_nll", "initial-loss", "pass", None),
    ("detached_branch", "gradients", "fail", "no-gradient"),
    ("nonfinite_grad", "gradients", "fail", "nonfinite"),
    ("healthy_mlp", "gradients", "pass", None),
    ("healthy_gpt", "gradients", "pass", None),  # attention's query/key start with tiny gradients
    ("healthy_rnn", "gradients", "pass", None),
    ("gan_detached_fake_reused", "gradients", "fail", "no-gradient"),  # the generator's own step
    ("healthy_gan", "gradients", "pass", None),
    ("healthy_wgan_gp", "gradients", "pass", None),  # the critic's output bias: exact zeros that cancel
    ("healthy_wgan_gp_trainer", "gradients", "pass", None),
    # gradients removed after backward for a warm-up (p.grad = None), as DINO and SwAV do
    ("healthy_dino_last_layer_warmup", "gradients", "pass", None),
    ("healthy_swav_prototypes_warmup", "gradients", "pass", None),
    ("lr_zero_warmup", "overfit", "fail", "cannot-overfit-batch"),
    ("healthy_mlp", "overfit", "pass", None),
    ("healthy_gpt", "overfit", "pass", None),  # no DataLoader: random windows, the RNG rewound
    ("nondeterministic_eval", "eval", "fail", "nondeterministic-eval"),
    # a sampling model (a VAE) draws normal noise in eval by design: not judged, and said why
    ("healthy_vae_sampled_eval", "eval", "n/a", None),
    ("healthy_cvae_inplace_sampling", "eval", "n/a", None),
    ("noise_layer_not_gated_eval", "eval", "fail", "nondeterministic-eval"),  # noise of a fixed scale
    # a GAN's summed generator and discriminator losses are no objective to fit
    ("healthy_gan", "overfit", "n/a", None),
    ("healthy_dcgan_detach_for_d", "lr", "n/a", None),
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
    data = json.loads(report.read_text())
    # A gate: a failed probe exits 3 without --fail-on (test_gate.py), a clean run 0.
    failed = any(v["status"] == "fail" for v in data["preflight"]["probes"])
    assert ran.returncode == (3 if failed else 0), ran.stderr[-3000:]
    return ran, data


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
    status, id_ = _verdict_and_id(expected, probe)
    assert v["status"] == status, f"{name}: {v}\n{ran.stderr[-3000:]}"
    if id_:
        assert v["findings"] == [id_]


def test_eval_names_the_module_and_the_line(tmp_path: Path) -> None:
    _, data = preflight(tmp_path, ZOO / "nondeterministic_eval.py", "--only", "eval")
    (f,) = [f for f in data["findings"] if f["id"] == "nondeterministic-eval"]
    assert f["evidence"]["module"] == "ResidualMLP.blocks.0"
    assert "ResidualMLP.blocks.0 (ResidualBlock) differs between the passes although its inputs agree" in f["message"]
    lines = (ZOO / "nondeterministic_eval.py").read_text(encoding="utf-8").splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "h = F.dropout(" in text)
    assert f"nondeterministic_eval.py:{line}: `h = F.dropout(h, p=self.dropout)`" in f["message"]
    assert "training=self.training" in f["fix"]


MC_DROPOUT = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.drop, self.fc2 = nn.Linear(8, 32), nn.Dropout(0.3), nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(self.drop(F.relu(self.fc1(x))))

    def train(self, mode=True):
        super().train(mode)
        self.drop.train()  # "MC dropout": keep sampling at test time
        return self


torch.manual_seed(0)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(10):
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
'''


def test_eval_names_a_dropout_left_in_train_mode(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(MC_DROPOUT)
    _, data = preflight(tmp_path, tmp_path / "train.py", "--only", "eval")
    (f,) = [f for f in data["findings"] if f["id"] == "nondeterministic-eval"]
    assert "Net.drop (Dropout) differs between the passes: the module is still in train mode" in f["message"]
    assert f["where"] == ["Net.drop"]


def test_mse_judges_the_argument_that_trains(tmp_path: Path) -> None:
    """mse_loss(target, prediction) is the same loss: the prediction is the argument with a
    gradient, whichever side it is on (healthy_dqn_td_target_first.py passes in PREFLIGHT_CASES)."""
    report = tmp_path / "pf.json"
    ran = traindoc("preflight", "--json", str(report), "--only", "initial-loss",
                   str(PREFLIGHT_ZOO / "bad_init_regression.py"), "--target-first", cwd=tmp_path, timeout=300)
    assert ran.returncode == 3, ran.stderr[-3000:]
    (f,) = [f for f in json.loads(report.read_text())["findings"] if f["id"] == "bad-initial-loss"]
    assert f["evidence"]["target_mean_square"] < 2  # the standardized targets, not the 40x outputs


def test_lr_sweep_reports_where_the_loss_falls(tmp_path: Path) -> None:
    _, low = preflight(tmp_path, PREFLIGHT_ZOO / "lr_far_too_low.py", "--only", "lr")
    (f,) = [f for f in low["findings"] if f["id"] == "lr-out-of-range"]
    assert "AdamW at lr 1.00e-06; its usual range is 1.00e-05-0.01 is far below" in f["message"]
    ratios = f["evidence"]["loss_ratio_by_lr_factor"]
    assert list(ratios)[:3] == ["1x", "10x", "100x"]  # from 1x upwards: a plateau needs nothing below
    assert ratios["1x"] > 0.9 and ratios["10x"] > 0.9 and min(ratios.values()) <= 0.5
    _, high = preflight(tmp_path, PREFLIGHT_ZOO / "lr_far_too_high.py", "--only", "lr")
    (g,) = [f for f in high["findings"] if f["id"] == "lr-out-of-range"]
    assert "SGD at lr 3" in g["message"] and "far above" in g["message"] and "Lower the LR" in g["fix"]


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


def test_whole_preflight_of_a_healthy_case_passes(tmp_path: Path) -> None:
    ran, data = preflight(tmp_path, PREFLIGHT_ZOO / "healthy_resume.py", "--fail-on", "warning")
    statuses = {v["probe"]: v["status"] for v in data["preflight"]["probes"]}
    assert statuses == dict.fromkeys(("initial-loss", "gradients", "overfit", "eval", "resume", "lr"), "pass")
    assert data["findings"] == []  # its time follows the machine's load: not asserted
    assert "pass" in ran.stderr and ran.stdout == ""  # the script's own prints are kept out


SCRIBBLER = '''
import os, sys
import torch
import torch.nn as nn
import torch.nn.functional as F

out = sys.argv[1]  # an absolute folder of the user's, with a checkpoint in it already
torch.manual_seed(0)  # the batch the overfit probe repeats: an unseeded one failed it at times
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


@pytest.mark.parametrize("name,status", [("healthy_resume", "pass"), ("resume_no_rng", "fail")])
def test_resume_goes_through_a_checkpoint_saved_to_an_absolute_path(name: str, status: str, tmp_path: Path) -> None:
    """`--out /abs/folder`, written atomically (a .tmp file, then os.replace): the relaunch
    resumes from it as from a relative one, and the folder is left empty afterwards."""
    out, report = tmp_path / "checkpoints", tmp_path / "pf.json"
    ran = traindoc("preflight", "--json", str(report), "--only", "resume", str(PREFLIGHT_ZOO / f"{name}.py"),
                   "--out", str(out), cwd=tmp_path, timeout=300)
    data = json.loads(report.read_text())
    v = verdict(data, "resume")
    assert v["status"] == status, (v, ran.stderr[-2000:])
    assert str(out / "last.pt") in v["summary"]
    if status == "fail":  # read while it existed: preflight removes it after the launch
        (f,) = data["findings"]
        assert "torch RNG state (the checkpoint holds none)" in f["message"]
    assert list(out.iterdir()) == []  # the checkpoints preflight made there are gone


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


@pytest.mark.parametrize("measured,walk", [
    ({1: 0.44, 10: 0.29, 100: 0.49, 0.1: 0.88}, [1, 10, 100, 0.1]),  # falls: up while faster, one below
    ({1: 1.0, 10: 0.99, 100: 0.6, 1000: 0.1, 10000: math.inf}, [1, 10, 100, 1000, 10000]),  # a plateau
    ({1: math.inf, 0.1: 0.5}, [1, 0.1]),  # diverges: down until it falls
    ({1: 0.95, 10: 0.8, 100: 0.4, 1000: 1.0}, [1, 10, 100, 1000]),  # up to where it gets slower
])
def test_lr_sweep_walks_only_as_far_as_needed(measured: dict[float, float], walk: list[float]) -> None:
    from traindoc.preflight.lr import GRID, next_factor

    ratios: dict[float, float] = {}
    factor = next_factor(ratios, GRID)
    while factor is not None:
        ratios[factor] = measured[factor]
        factor = next_factor(ratios, GRID)
    assert list(ratios) == walk


def test_vanishing_gradients_names_the_input_side_layers(tmp_path: Path) -> None:
    _, data = preflight(tmp_path, PREFLIGHT_ZOO / "vanishing_sigmoid_mlp.py", "--only", "gradients")
    (f,) = [f for f in data["findings"] if f["id"] == "vanishing-gradients"]
    assert f["where"] == ["0.weight", "2.weight", "4.weight"]  # nn.Sequential's first Linear layers
    assert f["evidence"]["ratio"] > f["evidence"]["threshold"] and f["evidence"]["output_side"] == "22.weight"
