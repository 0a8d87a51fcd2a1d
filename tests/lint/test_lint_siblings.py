"""Lint follows calls into sibling modules of the same folder (``from engine import step``,
``from .loops import train_one_epoch``, ``import engine`` then ``engine.step(...)``), as it
follows calls within one file, and reports a finding inside a sibling at the sibling's line.

Each case is written here in two import styles; each has an invalid form (fires at the given
file and line) and a valid twin (quiet). Every invalid case is also quiet when the script is
linted without its folder: the finding needs the sibling, so these tests can fail.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from traindoc.lint import lint_paths, lint_source



def _fill(template: str, **parts: str) -> str:
    """``template`` with ``{name}`` replaced by ``parts[name]`` (other braces left alone)."""
    for name, text in parts.items():
        template = template.replace("{" + name + "}", text)
    return template


# (case id, {file name: source}, [(file, line, rule id)] expected when train.py is linted)
ACCUM_LOOP = """
    import torch
    import torch.nn.functional as F
    {imp}

    model = torch.nn.Linear(16, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    accum = 4
    loader = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(32)]
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        {backward}
        if (i + 1) % accum == 0:
            {call}(opt)
"""
STEP_HELPER = """
    def step_and_clear(optimizer):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
"""
EPOCH_LOOP = """
    import torch
    from torch import nn
    {imp}


    def main(epochs=3):
        net = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 1))
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=epochs)
        data = [(torch.randn(4, 10), torch.randn(4, 1)) for _ in range(10)]
        for epoch in range(epochs):
            {first}
            {second}
"""
EPOCH_HELPER = """
    import torch.nn.functional as F


    def train_one_epoch(net, optimizer, data):
        for x, y in data:
            optimizer.zero_grad()
            F.mse_loss(net(x), y).backward()
            optimizer.step()
"""
DISTILL_LOOP = """
    import torch
    import torch.nn.functional as F
    {imp}

    student = torch.nn.Linear(32, 10)
    teacher = torch.nn.Linear(32, 10)
    opt = torch.optim.SGD(student.parameters(), lr=0.01)
    temperature = torch.nn.Parameter(torch.tensor(2.0))
    for x in [torch.randn(8, 32) for _ in range(5)]:
        soft = {call}(teacher, x)
        loss = F.kl_div(F.log_softmax(student(x), -1), F.softmax(soft / temperature, -1), reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
DISTILL_HELPER = """
    import torch


    @torch.{mode}()
    def teacher_logits(teacher, x):
        return teacher(x)
"""
SAVE_LOOP = """
    import torch
    {imp}

    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1000)
    for step in range(1000):
        loss = model(torch.randn(4, 8)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % 100 == 0:
            {save}
"""
SAVE_FUNCTION = """
    import torch


    def save_checkpoint(model, optimizer, step, path, scheduler=None):
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
        torch.save(state{extra}, path)
"""
SAVE_CLASS = """
    import os

    import torch


    class Checkpointer:
        def __init__(self, folder):
            self.folder = folder

        def save(self, model, optimizer, step, scheduler=None):
            path = os.path.join(self.folder, f"step_{step}.pt")
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step{extra}}, path)
"""

CLASSIFY_LOOP = """
    import torch
    {imp}

    model = {build}.to("cpu")
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for sample, target in [(torch.randn(4, 9), torch.randint(0, 6, (4,)))]:
        loss = criterion(model(sample), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""
NETWORK = """
    import torch.nn as nn
    import torch.nn.functional as F


    class Network(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(9, 32), nn.ReLU())
            self.head = nn.Linear(32, {width})

        def forward(self, x):
            out = self.head(self.body(x))
            return {out}
"""

CASES = [
    # Gradient accumulation whose optimizer step sits in a sibling's helper.
    ("accumulation-from-import", {
        "train.py": _fill(ACCUM_LOOP, imp="from engine import step_and_clear", backward="loss.backward()",
                                      call="step_and_clear"),
        "engine.py": STEP_HELPER,
    }, [("train.py", 11, "unscaled-grad-accumulation")]),
    ("accumulation-module-import", {
        "train.py": _fill(ACCUM_LOOP, imp="import engine as eng", backward="loss.backward()",
                                      call="eng.step_and_clear"),
        "engine.py": STEP_HELPER,
    }, [("train.py", 11, "unscaled-grad-accumulation")]),
    ("accumulation-divided", {
        "train.py": _fill(ACCUM_LOOP, imp="from engine import step_and_clear", backward="(loss / accum).backward()",
                                      call="step_and_clear"),
        "engine.py": STEP_HELPER,
    }, []),
    # The scheduler stepped before an epoch function of a sibling that steps the optimizer.
    ("scheduler-relative-import", {
        "train.py": _fill(EPOCH_LOOP, imp="from .loops import train_one_epoch", first="scheduler.step()",
                                      second="train_one_epoch(net, optimizer, data)"),
        "loops.py": EPOCH_HELPER,
    }, [("train.py", 12, "scheduler-before-optimizer")]),
    ("scheduler-aliased-import", {
        "train.py": _fill(EPOCH_LOOP, imp="from loops import train_one_epoch as run_epoch", first="scheduler.step()",
                                      second="run_epoch(net, optimizer, data)"),
        "loops.py": EPOCH_HELPER,
    }, [("train.py", 12, "scheduler-before-optimizer")]),
    ("scheduler-after", {
        "train.py": _fill(EPOCH_LOOP, imp="from .loops import train_one_epoch",
                                      first="train_one_epoch(net, optimizer, data)", second="scheduler.step()"),
        "loops.py": EPOCH_HELPER,
    }, []),
    # Teacher logits made under inference_mode in a sibling reach a learnable temperature.
    ("teacher-from-import", {
        "train.py": _fill(DISTILL_LOOP, imp="from distill import teacher_logits", call="teacher_logits"),
        "distill.py": _fill(DISTILL_HELPER, mode="inference_mode"),
    }, [("train.py", 10, "inference-tensor-in-autograd")]),
    ("teacher-package-import", {
        "train.py": _fill(DISTILL_LOOP, imp="from . import distill", call="distill.teacher_logits"),
        "distill.py": _fill(DISTILL_HELPER, mode="inference_mode"),
    }, [("train.py", 10, "inference-tensor-in-autograd")]),
    ("teacher-no-grad", {
        "train.py": _fill(DISTILL_LOOP, imp="from distill import teacher_logits", call="teacher_logits"),
        "distill.py": _fill(DISTILL_HELPER, mode="no_grad"),
    }, []),
    # A sibling's checkpoint function leaves out the scheduler the script trains with: found at
    # the sibling's checkpoint dict.
    ("checkpoint-function", {
        "train.py": _fill(SAVE_LOOP, imp="from ckpt import save_checkpoint",
                                     save='save_checkpoint(model, optimizer, step, f"ckpt_{step}.pt")'),
        "ckpt.py": _fill(SAVE_FUNCTION, extra=""),
    }, [("ckpt.py", 5, "checkpoint-incomplete")]),
    ("checkpoint-class", {
        "train.py": _fill(SAVE_LOOP, imp="from .checkpointing import Checkpointer",
                                     save='Checkpointer("runs").save(model, optimizer, step)'),
        "checkpointing.py": _fill(SAVE_CLASS, extra=""),
    }, [("checkpointing.py", 12, "checkpoint-incomplete")]),
    ("checkpoint-class-complete", {
        "train.py": _fill(SAVE_LOOP, imp="from .checkpointing import Checkpointer",
                                     save='Checkpointer("runs").save(model, optimizer, step, scheduler)'),
        "checkpointing.py": _fill(SAVE_CLASS, extra=', "scheduler": scheduler.state_dict()'),
    }, []),
    # The model's class lives in a sibling: its forward's last op judges the loss's input.
    ("probabilities-module-import", {
        "train.py": _fill(CLASSIFY_LOOP, imp="import network as net", build="net.Network()"),
        "network.py": _fill(NETWORK, width="6", out="F.softmax(out, dim=1)"),
    }, [("train.py", 8, "cross-entropy-on-probabilities")]),
    ("one-class-from-import", {
        "train.py": _fill(CLASSIFY_LOOP, imp="from network import Network", build="Network()"),
        "network.py": _fill(NETWORK, width="1", out="out"),
    }, [("train.py", 8, "single-class-softmax")]),
    ("logits-module-import", {
        "train.py": _fill(CLASSIFY_LOOP, imp="import network as net", build="net.Network()"),
        "network.py": _fill(NETWORK, width="6", out="out"),
    }, []),
]


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, code in files.items():
        (folder / name).write_text(textwrap.dedent(code).lstrip("\n"))


def _found(result) -> list[tuple[str, int, str]]:
    return sorted((Path(f.path).name, f.line, f.finding.id) for f in result.findings)


@pytest.mark.parametrize("files, expected", [pytest.param(f, e, id=i) for i, f, e in CASES])
def test_calls_into_sibling_modules_are_followed(tmp_path: Path, files: dict[str, str], expected: list) -> None:
    _write(tmp_path, files)
    result = lint_paths([tmp_path / "train.py"], use_config=False)
    assert not result.errors
    assert _found(result) == expected
    if expected:  # without its folder the script alone shows nothing: the sibling is needed
        alone, errors = lint_source((tmp_path / "train.py").read_text(), "train.py")
        assert not errors and alone == []


def test_a_sibling_finding_is_reported_once_with_its_own_lines(tmp_path: Path) -> None:
    """Linting the folder reaches ckpt.py twice (itself, and through train.py): one finding,
    whose message names the sibling's line, not the line it had appended to the script."""
    _write(tmp_path, dict(CASES[9][1]))
    result = lint_paths([tmp_path], use_config=False)
    assert _found(result) == [("ckpt.py", 5, "checkpoint-incomplete")]
    assert "saved at ckpt.py line 6 " in result.findings[0].finding.message


def test_suppression_comment_in_the_sibling_holds(tmp_path: Path) -> None:
    files = dict(CASES[9][1])
    files["ckpt.py"] = files["ckpt.py"].replace('"step": step}', '"step": step}  # traindoc: ignore[checkpoint-incomplete]')
    _write(tmp_path, files)
    assert _found(lint_paths([tmp_path / "train.py"], use_config=False)) == []


def test_a_name_clash_leaves_the_script_alone(tmp_path: Path) -> None:
    """The script defines a function of the same name as one the sibling would bring: appending
    it would make the script's own calls ambiguous, so the sibling is not followed and the
    script's own flow is still seen."""
    files = {
        "train.py": """
            import torch
            from engine import step_and_clear


            def helper(optimizer):
                optimizer.step()


            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in [torch.randn(2, 4)] * 3:
                model(x).sum().backward()
                helper(opt)
                step_and_clear(opt)
        """,
        "engine.py": """
            def helper(optimizer):
                optimizer.zero_grad()


            def step_and_clear(optimizer):
                helper(optimizer)
        """,
    }
    _write(tmp_path, files)
    assert _found(lint_paths([tmp_path / "train.py"], use_config=False)) == [("train.py", 6, "missing-zero-grad")]


def test_unreadable_or_broken_sibling_is_skipped(tmp_path: Path) -> None:
    files = {"train.py": _fill(ACCUM_LOOP, imp="from engine import step_and_clear", backward="loss.backward()",
                                           call="step_and_clear"),
             "engine.py": "def step_and_clear(optimizer:\n"}
    _write(tmp_path, files)
    result = lint_paths([tmp_path / "train.py"], use_config=False)
    assert not result.errors and _found(result) == []
