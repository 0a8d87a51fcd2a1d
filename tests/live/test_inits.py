"""Parameter inits are seen through the op-level mode, with torch.nn.init left as torch's own.

Three styles of init code, each with a targeted init that a later blanket one overwrites
(must fire) and its healthy order (quiet): a timm-style vision head (``orthogonal_`` with a
small gain, then ``self.apply(self._init_weights)`` with ``trunc_normal_``: two inits made of
several in-place ops each, whose spread is read after their last op); research code looping
over ``self.modules()`` in ``__init__`` (``kaiming_uniform_``, which hands itself to the mode
whole, then ``normal_``); and loaded weights copied over an init, which are no init.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc


class PatchClassifier(nn.Module):
    """A ViT-like classifier: patch embedding, an MLP block, a head initialised small."""

    def __init__(self, targeted_last: bool) -> None:
        super().__init__()
        self.embed = nn.Linear(12, 32)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, 5)
        if targeted_last:
            self.apply(self._init_weights)
            self._init_head()
        else:
            self._init_head()
            self.apply(self._init_weights)

    def _init_head(self) -> None:
        nn.init.orthogonal_(self.head.weight, gain=0.01)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        return self.head(h + self.mlp(h))


class ResearchNet(nn.Module):
    """Research code: the blanket init is a loop over ``self.modules()``; the output layer is
    given a fan-in uniform init by hand."""

    def __init__(self, targeted_last: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))
        self.out = nn.Linear(16, 4)
        if not targeted_last:
            nn.init.kaiming_uniform_(self.out.weight, a=math.sqrt(5), mode="fan_in")
        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.weight.data.normal_(0.0, 0.25)
        if targeted_last:
            nn.init.kaiming_uniform_(self.out.weight, a=math.sqrt(5), mode="fan_in")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.out(x)


def _train(make: Callable[[], nn.Module], inputs: int, classes: int, steps: int = 4) -> list[float]:
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(16, inputs), torch.randint(0, classes, (16,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


STYLES: dict[str, tuple[Callable[[bool], nn.Module], int, int]] = {
    "timm_head": (PatchClassifier, 12, 5),
    "research_loop": (ResearchNet, 16, 4),
}


def _watched(style: str, targeted_last: bool) -> tuple[list[float], Any]:
    make, inputs, classes = STYLES[style]
    with traindoc.watch(announce=False) as doc:
        losses = _train(lambda: make(targeted_last), inputs, classes)
    return losses, doc


@pytest.mark.parametrize("style", sorted(STYLES))
def test_a_targeted_init_overwritten_by_a_blanket_one_is_found(style: str) -> None:
    _, doc = _watched(style, targeted_last=False)
    found = [f for f in doc.findings if f.id == "repeated-init"]
    assert len(found) == 1, [f.id for f in doc.findings]
    ev = found[0].evidence
    assert ev["parameters"] == (["head.weight"] if style == "timm_head" else ["out.weight"])
    before, after = ev["stds"]
    if style == "timm_head":
        # orthogonal_ copies Q in, then scales it by the gain; trunc_normal_ fills, then copies
        # resampled values in: read after the last op, each init's own spread.
        assert before < 0.01 * 0.5 and after == pytest.approx(0.02, rel=0.25)
        assert "_init_head" in ev["sites"][0] and "_init_weights" in ev["sites"][1]
    else:
        std = math.sqrt(2 / (1 + 5) / 16)  # kaiming_uniform_, a=sqrt(5), fan_in 16
        assert before == pytest.approx(std, rel=0.2) and after == pytest.approx(0.25, rel=0.2)
        assert all("__init__" in s for s in ev["sites"])


@pytest.mark.parametrize("style", sorted(STYLES))
def test_the_healthy_order_is_quiet_and_training_unchanged(style: str) -> None:
    make, inputs, classes = STYLES[style]
    bare = _train(lambda: make(True), inputs, classes)
    watched, doc = _watched(style, targeted_last=True)
    assert watched == bare
    assert [f.id for f in doc.findings if f.severity != "info"] == []


@pytest.mark.parametrize("how", ["load_state_dict", "copy_loop"])
def test_weights_loaded_over_an_init_are_no_init(how: str) -> None:
    """A checkpoint's weights copied over every parameter (3x the inits' spread), by torch's
    ``load_state_dict`` or by a loop of the user's: the copies are not inits (a user's copy
    taken for one would be a blanket init overwriting the head's), and the spread of the init
    before them is read before they land."""
    torch.manual_seed(1)
    saved = {k: v * 3 for k, v in PatchClassifier(targeted_last=True).state_dict().items()}

    def make(targeted_last: bool) -> nn.Module:
        model = PatchClassifier(targeted_last)
        if how == "load_state_dict":
            model.load_state_dict(saved)
        else:
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.copy_(saved[name])
        return model

    with traindoc.watch(announce=False) as doc:
        _train(lambda: make(True), 12, 5)
    assert [f.id for f in doc.findings if f.severity != "info"] == []
    with traindoc.watch(announce=False) as doc:
        _train(lambda: make(False), 12, 5)
    found = [f for f in doc.findings if f.id == "repeated-init"]
    assert len(found) == 1 and found[0].evidence["stds"][1] == pytest.approx(0.02, rel=0.25)


def test_torch_nn_init_is_torchs_own_while_the_model_is_built() -> None:
    origs = {name: getattr(nn.init, name) for name in dir(nn.init) if name.endswith("_")}
    seen: dict[str, bool] = {}

    def make(targeted_last: bool) -> nn.Module:
        seen.update({name: getattr(nn.init, name) is fn for name, fn in origs.items()})
        return PatchClassifier(targeted_last)

    with traindoc.watch(announce=False) as doc:
        _train(lambda: make(False), 12, 5)
    assert seen and all(seen.values()), [n for n, same in seen.items() if not same]
    assert "repeated-init" in [f.id for f in doc.findings]  # the probe was on


def test_the_init_listeners_go_at_the_first_step() -> None:
    """Training's sampled steps do not pass the fills of their forwards to the init probe."""
    copy_ = torch.Tensor.copy_
    with traindoc.watch(announce=False) as doc:
        ops = doc._probes.patcher.ops
        before = [p for p, _, _ in ops._table.get(copy_, [])]
        _train(lambda: PatchClassifier(True), 12, 5, steps=1)
        after = [p for p, _, _ in ops._table.get(copy_, [])]
    assert "init" in before and "init" not in after
