"""Watching replaces nothing the user can see of torch (issue 27): torch, torch.nn.functional,
torch.Tensor, torch.nn.utils, torch.autograd and torch.distributed keep their own functions
while traindoc watches, except the few documented in docs/live-patches.md (no hook exists there), and real
programs that depend on that (TorchScript, torch.distributed.optim, a ``__torch_function__``
table, the user's own monkeypatches, torch.fx, torch.compile) run under ``traindoc run`` exactly
as under ``python``: same output, same weights, same number of dynamo graphs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import traindoc
from traindoc.live.collectives import OPS, TIMED

COLLECTIVES = [op for op in OPS + TIMED if hasattr(torch.distributed, op)]

HERE = Path(__file__).parent
SCRIPTS = sorted((HERE / "untouched_scripts").glob("*.py"))
DOC = HERE.parents[1] / "docs" / "live-patches.md"

# (namespace, name): patched while watching, each listed with its reason in docs/live-patches.md
DOCUMENTED = {("torch.autograd", "_engine_run_backward")}
if sys.version_info < (3, 12):  # no sys.monitoring: the collectives are timed by a wrapper
    DOCUMENTED |= {("torch.distributed", op) for op in COLLECTIVES}
SPACES = {"torch": torch, "torch.nn.functional": F, "torch.Tensor": torch.Tensor,
          "torch.nn.utils": torch.nn.utils, "torch.nn.init": torch.nn.init, "torch.autograd": torch.autograd,
          "torch.autograd.Function": torch.autograd.Function,
          "torch.distributed": torch.distributed}


def _ours() -> set[tuple[str, str]]:
    """The names whose value is a function of traindoc's (torch replaces some of its own
    lazily, e.g. torch.manual_seed on its first call: not ours)."""
    package = os.path.dirname(traindoc.__file__)
    found = set()
    for space, ns in SPACES.items():
        for name, value in list(vars(ns).items()):
            if type(value) in (classmethod, staticmethod):  # type(): isinstance would warn on deprecated names
                value = value.__func__
            code = getattr(value, "__code__", None) if callable(value) else None
            if isinstance(getattr(code, "co_filename", None), str) and code.co_filename.startswith(package):
                found.add((space, name))
    return found


def _train(steps: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
        loss = torch.nan_to_num(F.cross_entropy(model(torch.where(x > 0, x, -x)), y))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


def test_nothing_user_visible_is_replaced_while_watching() -> None:
    assert _ours() == set()
    with traindoc.watch(announce=False):
        _train(30)
        during = _ours()
    assert during <= DOCUMENTED, sorted(during - DOCUMENTED)
    assert during  # the check sees our patches: it can fail
    assert _ours() == set()  # all put back


def test_every_remaining_patch_is_documented() -> None:
    text = DOC.read_text()
    for space, name in DOCUMENTED:
        if space == "torch.distributed":
            assert f"`{name}`" in text, f"{space}.{name} is patched but docs/live-patches.md does not say why"
            continue
        assert f"{space}.{name}" in text, f"{space}.{name} is patched but docs/live-patches.md does not say why"


def test_a_users_patch_made_while_watching_stays() -> None:
    """The user patches F.cross_entropy and torch.save after traindoc started: theirs stays
    after traindoc leaves (restoring ours would silently undo it)."""
    orig_ce, orig_save = F.cross_entropy, torch.save
    try:
        with traindoc.watch(announce=False):
            def mine_ce(*a: object, **k: object) -> torch.Tensor:
                return orig_ce(*a, **k)  # type: ignore[arg-type]

            def mine_save(*a: object, **k: object) -> None:
                return None

            F.cross_entropy, torch.save = mine_ce, mine_save  # type: ignore[assignment]
            _train(3)
        assert F.cross_entropy is mine_ce and torch.save is mine_save
    finally:
        F.cross_entropy, torch.save = orig_ce, orig_save  # type: ignore[assignment]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_real_programs_run_as_without_traindoc(script: Path, tmp_path: Path) -> None:
    bare = _run([str(script)], tmp_path)
    assert bare.returncode == 0, bare.stderr[-2000:]
    watched = _run(["-m", "traindoc", "run", "--json", str(tmp_path / "r.json"), str(script)], tmp_path)
    assert watched.returncode == 0, watched.stderr[-3000:]
    assert watched.stdout == bare.stdout  # same handlers called, same graphs, same weights
    assert re.search(r"checksum -?\d", bare.stdout)
    assert (tmp_path / "r.json").exists()
    graphs = [re.search(r"^graphs (\d+)$", r.stderr, re.M) for r in (bare, watched)]
    if graphs[0] and graphs[1]:  # a compiled function: at most the one recompilation documented
        assert int(graphs[1].group(1)) <= int(graphs[0].group(1)) + 1
