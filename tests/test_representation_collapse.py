"""representation-collapse on hand-made events (a collapse to the end fires; a recovery, an
init transient and a short run stay quiet), and what the live probe measures: the spread of
the embeddings a loss normalizes or compares, never a parameter, a broadcast row or a
normalization across the batch."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import traindoc
from traindoc.detectors.representation_collapse import RepresentationCollapse
from traindoc.events import Embeddings, Scalar


def _run(spreads: list[float], loss: bool = True) -> list:
    det = RepresentationCollapse()
    for i, s in enumerate(spreads):
        if loss:
            det.observe(Scalar(step=10 * i, name="loss", value=1.0 - i / len(spreads)))
        det.observe(Embeddings(step=10 * i, spread=s, rows=64, dim=32, where="train.py:40"))
    return list(det.finish())


def test_fires_on_a_collapse_that_lasts_to_the_end() -> None:
    found = _run([0.8, 0.6, 0.4, 0.3] + [0.1] * 8 + [0.05] * 4)
    assert len(found) == 1
    f = found[0]
    assert f.step == 40 and f.where == ("train.py:40",)
    ev = f.evidence
    assert (ev["points"], ev["first_spread"], ev["peak_spread"]) == (12, 0.8, 0.8)
    assert ev["mean_cosine"] == pytest.approx(1 - 0.1 ** 2)
    assert ev["loss_first"] == 1.0 and "training loss went from 1 to" in f.message
    assert "z1.detach()" in f.fix


def test_quiet_when_the_collapse_ends_before_the_run() -> None:
    assert _run([0.8] + [0.1] * 10 + [0.5]) == []


def test_quiet_for_an_init_whose_outputs_spread_as_it_trains() -> None:
    assert _run([0.05] * 8 + [0.3, 0.5, 0.7, 0.8, 0.8, 0.9]) == []


def test_quiet_for_embeddings_that_start_in_a_narrow_cone_and_stay() -> None:
    """A pretrained encoder's anisotropy: collinear from the first step, not collapsed by it."""
    assert _run([0.15, 0.12, 0.14, 0.13, 0.16, 0.12, 0.11, 0.12, 0.13, 0.12, 0.11, 0.12]) == []


def test_quiet_on_too_few_points_or_too_short_a_streak() -> None:
    assert _run([0.05] * 9) == []  # under min_points
    assert _run([0.9] * 10 + [0.05] * 7) == []  # under streak


def test_nan_spreads_are_left_to_nonfinite() -> None:
    assert _run([0.8] * 4 + [math.nan] * 12) == []


def _embeddings(train) -> list[Embeddings]:
    recorded: list[object] = []
    with traindoc.watch(announce=False) as doc:
        doc.session._sink = recorded.append
        train()
    return [e for e in recorded if isinstance(e, Embeddings)]


def _steps(loss_of, steps: int = 6) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    head = torch.nn.Parameter(torch.randn(5, 8))
    opt = torch.optim.SGD([*model.parameters(), head], lr=0.01)
    for _ in range(steps):
        x = torch.randn(32, 16)
        loss = loss_of(model(x), model(x + 0.1 * torch.randn_like(x)), head)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_measures_what_a_loss_compares_with_the_reference_spread() -> None:
    seen: list[float] = []

    def loss(za: torch.Tensor, zb: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        u = F.normalize(za.detach(), dim=1)
        seen.append(float((1 - u.mean(0).pow(2).sum()).sqrt()))
        return -F.cosine_similarity(za, zb).mean()

    got = _embeddings(lambda: _steps(loss))
    assert [e.step for e in got] == list(range(6)) and got[0].rows == 32 and got[0].dim == 8
    assert all(e.spread >= s - 1e-6 for e, s in zip(got, seen))  # the step's largest, za's or zb's
    assert got[0].where.endswith(f"test_representation_collapse.py:{loss.__code__.co_firstlineno + 3}")


def test_leaves_out_parameters_broadcast_rows_and_batch_normalization() -> None:
    def loss(za: torch.Tensor, zb: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        w = F.normalize(head, dim=1)  # a cosine classifier's weight: a parameter
        q = F.normalize(za.mean(0, keepdim=True).expand(32, -1), dim=1)  # one row broadcast
        across = F.normalize(zb, dim=0)  # along the batch, not per row
        small = F.normalize(za[:4], dim=1)  # four rows are no batch
        return (za @ w.t()).mean() + (q * across).sum() + small.sum()

    assert _embeddings(lambda: _steps(loss)) == []


def test_a_sentence_embedding_fine_tune_with_transformers_is_measured_and_quiet() -> None:
    """A Hugging Face BERT, mean-pooled, fine-tuned to score pairs by cosine similarity (the
    sentence-transformers CosineSimilarityLoss recipe): its embeddings sit in a cone (a mean
    cosine near 0.9) from the start, which is no collapse the training made."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=128)
    encoder = transformers.BertModel(config)
    opt = torch.optim.AdamW(encoder.parameters(), lr=2e-5)

    def embed(ids: torch.Tensor) -> torch.Tensor:
        return encoder(input_ids=ids).last_hidden_state.mean(1)

    recorded: list[object] = []
    with traindoc.watch(announce=False) as doc:
        doc.session._sink = recorded.append
        for _ in range(30):
            a, b = torch.randint(0, 500, (16, 12)), torch.randint(0, 500, (16, 12))
            loss = F.mse_loss(torch.cosine_similarity(embed(a), embed(b)), torch.rand(16))
            opt.zero_grad()
            loss.backward()
            opt.step()
    spreads = [e.spread for e in recorded if isinstance(e, Embeddings)]
    assert len(spreads) >= 16 and max(spreads) < 0.6  # measured, in a cone
    assert "representation-collapse" not in [f.id for f in doc.findings]


def test_a_printed_collapse_level_is_judged_live_when_no_embedding_call_is_seen() -> None:
    """lightly's tutorial style: the script computes SimSiam's collapse level itself and prints
    it each epoch; its cosine is written out by hand, so no F.normalize or F.cosine_similarity
    call is there to measure. Without the stop-gradient the printed level climbs to ~0.9."""
    torch.manual_seed(0)
    centers = torch.randn(10, 32) * 3
    encoder = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    predictor = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 64))
    opt = torch.optim.SGD([*encoder.parameters(), *predictor.parameters()], lr=0.02, momentum=0.9)

    def cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))

    levels = []
    with traindoc.watch(announce=False) as doc:
        for epoch in range(60):
            for _ in range(5):
                x = centers[torch.randint(0, 10, (64,))] + torch.randn(64, 32)
                z1, z2 = encoder(x + 0.5 * torch.randn_like(x)), encoder(x * (1 + 0.2 * torch.randn_like(x)))
                loss = -(cos(predictor(z1), z2).mean() + cos(predictor(z2), z1).mean()) / 2
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():
                unit = z1 / z1.norm(dim=1, keepdim=True)
                level = max(0.0, 1 - 64 ** 0.5 * float(unit.std(0).mean()))
            levels.append(level)
            print(f"[Epoch {epoch:3d}] Loss = {loss.item():.2f} | Collapse Level: {level:.2f} / 1.00")
    assert min(levels[:2]) < 0.6 and min(levels[-10:]) > 0.8  # the case means something
    found = [f for f in doc.findings if f.id == "representation-collapse"]
    assert found and found[0].evidence["metric"] == "metric.collapse_level"
