"""A live finding that names parameters or layers also says where they are defined: the line of
the owner class that assigns the layer (``self.aux = nn.Linear(...)``), through torch's own
layers and containers (a Linear's ``weight``, an ``nn.Sequential``'s ``0``, a ``ModuleList``'s
index), in the user's file or an installed library's."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.findings import Finding
from traindoc.live.definitions import Definitions

HERE = "tests/live/test_definitions.py"


def line_of(cls: type, text: str) -> str:
    """``HERE:N`` of the first line of ``cls``'s source that contains ``text``."""
    lines, start = inspect.getsourcelines(cls)
    return f"{HERE}:{start + next(i for i, line in enumerate(lines) if text in line)}"


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)
        setattr(self, "gate", nn.Linear(d, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.gate(x)) * F.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self, d: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(d, d),
            nn.ReLU(),
        )
        self.blocks = nn.ModuleList([Block(d) for _ in range(2)])
        self.pos = nn.Parameter(torch.zeros(d))
        self.add_module("head", nn.Linear(d, classes))
        self.aux = nn.Linear(d, classes)  # built, never called: no-gradient

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x) + self.pos
        for block in self.blocks:
            h = block(h)
        return self.head(h)


class Wider(Net):  # assigns nothing itself: the base class's lines
    pass


def definitions(model: nn.Module) -> Definitions:
    named = [(p, n) for n, p in model.named_parameters()] + [(m, n) for n, m in model.named_modules() if n]
    return Definitions(named, [m for _, m in model.named_modules()])


@pytest.mark.parametrize("cls", [Net, Wider])
def test_each_name_leads_to_the_assignment_of_its_layer(cls: type[Net]) -> None:
    sites = definitions(cls())
    assert sites.site("aux.weight") == sites.site("aux") == line_of(Net, "self.aux =")
    assert sites.site("body.0.weight") == sites.site("body.1") == line_of(Net, "self.body =")
    assert sites.site("blocks.1.fc.bias") == line_of(Block, "self.fc =")
    assert sites.site("blocks.0.gate.weight") == line_of(Block, 'setattr(self, "gate"')
    assert sites.site("blocks.0") == line_of(Net, "self.blocks =")
    assert sites.site("pos") == line_of(Net, "self.pos =")
    assert sites.site("head.weight") == line_of(Net, 'add_module("head"')


def test_torch_own_models_and_a_script_level_sequential_have_no_line() -> None:
    seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    assert definitions(seq).site("0.weight") is None
    transformer = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2)
    assert definitions(transformer).site("layers.0.linear1.weight") is None
    assert definitions(Net()).site("nowhere.weight") is None


def test_an_installed_library_class_is_named_from_its_package() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16)
    site = definitions(transformers.BertModel(config)).site("encoder.layer.0.attention.self.query.weight")
    assert site is not None and site.startswith("transformers/models/bert/modeling_bert.py:")
    lines, start = inspect.getsourcelines(transformers.models.bert.modeling_bert.BertSelfAttention)
    assert "self.query =" in lines[int(site.rpartition(":")[2]) - start]


def test_a_live_finding_gets_the_line_of_its_unused_layer() -> None:
    """The aux head never runs: no-gradient names its parameters and, now, its line."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    with traindoc.watch(announce=False) as doc:
        for _ in range(20):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = [f for f in doc.findings if f.id == "no-gradient"]
    assert found and found[0].where == ("aux.weight", "aux.bias", line_of(Net, "self.aux ="))
    assert all(not f.where or any(".py:" in w for w in f.where) for f in doc.findings)


def test_a_site_is_added_once_and_only_for_names_the_model_has() -> None:
    sites = definitions(Net())
    plain = Finding("no-gradient", "error", "t", "m", "c", "f", where=("aux.weight", "aux.bias", "train.py:3"))
    assert sites.add_sites(plain).where == (*plain.where, line_of(Net, "self.aux ="))
    unknown = Finding("no-gradient", "error", "t", "m", "c", "f", where=("group0.param0[3, 8]",))
    assert sites.add_sites(unknown) is unknown
