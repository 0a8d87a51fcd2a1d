"""Evaluation metrics of scripts that only print: derived from the evaluation's loss calls and
read from stdout (live/probes/eval_metrics.py, printed.py). Each derived number is checked against the
same number computed with plain PyTorch."""

from __future__ import annotations

import io
import sys
import threading
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.events import Scalar
from traindoc.live.probes import eval_metrics, printed
from traindoc.live.probes.printed import parse_line

MEASURED = ("val_acc", "val_classes", "val_pos_rate", "val_base_rate", "val_max_score")


# ---- printed lines ------------------------------------------------------------------------------
@pytest.mark.parametrize("line,expected", [
    ("epoch 3 val_acc 0.100", {"val_acc": 0.1}),
    ("val_acc: 0.1", {"val_acc": 0.1}),
    ("val_acc=0.1, done.", {"val_acc": 0.1}),
    ("Val Acc: 10.0%", {"val_acc": 0.1}),
    ("VAL-ACC = 45.5 %", {"val_acc": 0.455}),
    ("{'eval_loss': 0.3, 'eval_accuracy': 0.91}", {"eval_loss": 0.3, "eval_accuracy": 0.91}),
    ("val acc tensor(0.1000)", {"val_acc": 0.1}),
    ("Test set: Average loss: 0.0001, Accuracy: 9800/10000 (98%)", {"test_accuracy": 0.98}),
    ("epoch 2 loss=0.1234 val_loss=0.1100 f1=0.000", {"val_loss": 0.11, "val_f1": 0.0}),
    ("Train loss 0.100, acc 0.950 | Val loss 0.300, acc 0.500.", {"train_acc": 0.95, "val_acc": 0.5}),
    ("[val] loss: 0.3 acc: 0.25", {"val_loss": 0.3, "val_acc": 0.25}),
    ("loss: 0.1 - accuracy: 0.9 - val_loss: 0.3 - val_accuracy: 0.5", {"accuracy": 0.9, "val_accuracy": 0.5}),
    ("lr 1e-3 step 100/1000", {"lr": 1e-3}),
])
def test_printed_formats(line: str, expected: dict[str, float]) -> None:
    got = parse_line(line)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), (line, got)


def test_an_unsplit_accuracy_printed_after_an_evaluation_is_a_validation_one() -> None:
    assert "acc" in parse_line("epoch 1 acc 0.5")
    assert "val_acc" in parse_line("epoch 1 acc 0.5", evaluating=True)
    assert "train_acc" in parse_line("epoch 1 train loss 0.2 acc 0.5", evaluating=True)


def test_lines_without_pairs_give_nothing() -> None:
    for line in ("step  25 | time 3.2s", "Downloading 45.3MB", "x" * 5000, "1 2 3", "epoch"):
        got = parse_line(line)
        assert all(k.lower() in ("epoch", "step", "time", "x") for k in got), got


# ---- helpers ------------------------------------------------------------------------------------
def watched(fn: Callable[[], None], **options: Any) -> tuple[Any, list[Scalar]]:
    events: list[Any] = []
    with traindoc.watch(announce=False, **options) as doc:
        doc.session.event_listeners.append(events.append)
        fn()
    return doc, [e for e in events if isinstance(e, Scalar)]


def values(scalars: list[Scalar], name: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in scalars if e.name == name]


def make_task(classes: int = 4, n: int = 64) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, torch.randn(n, 8), torch.randint(classes, (n,))


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    model.train()
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


# ---- derived from the loss ----------------------------------------------------------------------
@pytest.mark.parametrize("style", ["no_grad", "inference_mode", "module", "eval_mode_grad_on", "nll"])
def test_evaluation_accuracy_is_derived_from_the_loss_calls(style: str) -> None:
    model, opt, x, y = make_task()
    expected: list[float] = []

    def run() -> None:
        for _ in range(3):
            train_step(model, opt, x, y)
            model.eval()
            logits_all = []
            for i in range(0, 64, 16):  # four evaluation batches
                xb, yb = x[i:i + 16], y[i:i + 16]
                if style == "no_grad":
                    with torch.no_grad():
                        logits = model(xb)
                        F.cross_entropy(logits, yb)
                elif style == "inference_mode":
                    with torch.inference_mode():
                        logits = model(xb)
                        F.cross_entropy(logits, yb)
                elif style == "module":
                    with torch.no_grad():
                        logits = model(xb)
                        nn.CrossEntropyLoss()(logits, yb)
                elif style == "eval_mode_grad_on":
                    logits = model(xb)
                    F.cross_entropy(logits, yb).item()
                else:
                    with torch.no_grad():
                        logits = model(xb)
                        nn.NLLLoss()(F.log_softmax(logits, 1), yb)
                logits_all.append(logits.detach())
            expected.append((torch.cat(logits_all).argmax(1) == y).float().mean().item())

    _, scalars = watched(run)
    got = values(scalars, "val_acc")
    assert [s for s, _ in got] == [1, 2, 3]  # the step the evaluation ran at
    assert [v for _, v in got] == pytest.approx(expected)
    assert values(scalars, "val_classes") == [(1, 4.0), (2, 4.0), (3, 4.0)]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_validation_loss_is_the_mean_over_the_evaluation(reduction: str) -> None:
    """Batches of unequal size and ignored targets: the mean of every counted element's loss,
    whichever reduction the script asked for, as the MNIST example's "Average loss" computes it."""
    model, opt, x, y = make_task(n=70)
    y = y.clone()
    y[:5] = -100
    expected: list[float] = []

    def run() -> None:
        for _ in range(2):
            train_step(model, opt, x, y.clamp(min=0))
            model.eval()
            with torch.no_grad():
                for i in range(0, 70, 32):  # 32, 32 and 6 rows
                    F.cross_entropy(model(x[i:i + 32]), y[i:i + 32], reduction=reduction)
                per_row = F.cross_entropy(model(x), y, reduction="none")
            expected.append((per_row.sum() / (y != -100).sum()).item())

    _, scalars = watched(run)
    assert values(scalars, "val_loss") == [(1, pytest.approx(expected[0])), (2, pytest.approx(expected[1]))]


def test_a_weighted_loss_gives_no_validation_loss_and_the_scripts_own_stands_alone() -> None:
    model, opt, x, y = make_task()

    def weighted() -> None:
        train_step(model, opt, x, y)
        with torch.no_grad():
            F.cross_entropy(model(x), y, weight=torch.tensor([1.0, 2.0, 3.0, 4.0]))

    own: list[float] = []

    def printed() -> None:
        train_step(model, opt, x, y)
        with torch.no_grad():
            loss = F.cross_entropy(model(x), y)
        own.append(round(loss.item() + 1, 4))
        print(f"val_loss {own[0]:.4f}")  # the script's own number (not the mean loss)

    assert values(watched(weighted)[1], "val_loss") == []
    assert values(watched(printed)[1], "val_loss") == [(1, pytest.approx(own[0]))]


def test_ignore_index_and_probability_targets() -> None:
    model, opt, x, y = make_task()
    y_ignored = y.clone()
    y_ignored[:10] = -100
    probs = F.one_hot(y, 4).float() * 0.9 + 0.025

    def run() -> None:
        train_step(model, opt, x, y)
        with torch.no_grad():
            F.cross_entropy(model(x), y_ignored)
        train_step(model, opt, x, y)
        with torch.no_grad():
            F.cross_entropy(model(x), probs)

    _, scalars = watched(run)
    model2, opt2, _, _ = make_task()
    train_step(model2, opt2, x, y)
    with torch.no_grad():
        first = (model2(x).argmax(1) == y)[10:].float().mean().item()
    train_step(model2, opt2, x, y)
    with torch.no_grad():
        second = (model2(x).argmax(1) == y).float().mean().item()
    assert [v for _, v in values(scalars, "val_acc")] == pytest.approx([first, second])


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_binary_scores_crossing_the_threshold_and_the_loss(reduction: str) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, t = torch.randn(50, 4), (torch.rand(50, 3) < 0.2).float()

    def run() -> None:
        loss = F.binary_cross_entropy_with_logits(model(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            F.binary_cross_entropy_with_logits(model(x[:20]), t[:20])
            nn.BCELoss(reduction=reduction)(torch.sigmoid(model(x[20:])), t[20:])

    _, scalars = watched(run)
    with torch.no_grad():
        scores = torch.sigmoid(model(x))
        whole = F.binary_cross_entropy_with_logits(model(x), t).item()
    assert values(scalars, "val_pos_rate") == [(1, pytest.approx((scores > 0.5).float().mean().item()))]
    assert values(scalars, "val_base_rate") == [(1, pytest.approx(t.mean().item()))]
    assert values(scalars, "val_max_score") == [(1, pytest.approx(scores.max().item()))]
    assert values(scalars, "val_loss") == [(1, pytest.approx(whole, rel=1e-5))]  # no class loss gave one


def test_training_steps_measure_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = eval_metrics._class_stats
    monkeypatch.setattr(eval_metrics, "_class_stats", lambda *a: calls.append(1) or real(*a))
    model, opt, x, y = make_task()

    def run() -> None:
        for _ in range(5):
            train_step(model, opt, x, y)
            with torch.no_grad():  # logging the training loss under no_grad before the step
                pass

    _, scalars = watched(run)
    assert calls == [] and not any(e.name in MEASURED for e in scalars)


def test_a_model_trained_in_eval_mode_is_not_an_evaluation() -> None:
    """model.eval() once, never model.train(): the training losses that follow are dropped."""
    model, opt, x, y = make_task()

    def run() -> None:
        model.eval()
        for _ in range(4):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    _, scalars = watched(run)
    assert values(scalars, "val_acc") == []


def test_training_steps_without_a_backward_in_eval_mode_are_not_an_evaluation() -> None:
    """A model wrapped with its loss that returns the loss as a float in eval mode (as
    pytorch-pfn-extras' examples write it), left in eval mode by an evaluation: its training
    steps call the loss, get no backward and step anyway. Those calls are not an evaluation;
    the real evaluation, after the step, still is."""
    model, opt, x, y = make_task()

    def run() -> None:
        train_step(model, opt, x, y)
        model.eval()
        with torch.no_grad():
            F.cross_entropy(model(x), y)  # the evaluation: one val_acc
        for _ in range(3):
            loss = F.cross_entropy(model(x), y)
            if model.training:
                loss.backward()
            opt.step()  # no gradient: nothing to apply
            opt.zero_grad()

    _, scalars = watched(run)
    assert [step for step, _ in values(scalars, "val_acc")] == [1]


def test_training_with_parts_or_all_of_the_model_in_eval_mode_stays_cheap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A BatchNorm frozen with .eval() is not the trained model; a model put in eval mode before
    every training step is measured on two steps, then never again."""
    calls = []
    real = eval_metrics._class_stats
    monkeypatch.setattr(eval_metrics, "_class_stats", lambda *a: calls.append(1) or real(*a))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randint(4, (32,))

    def run(freeze: Callable[[], None]) -> None:
        for _ in range(6):
            model.train()
            freeze()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    _, scalars = watched(lambda: run(lambda: model[1].eval()))
    assert calls == [] and values(scalars, "val_acc") == []
    _, scalars = watched(lambda: run(lambda: model.eval()))
    assert len(calls) == 2 and values(scalars, "val_acc") == []


def test_a_logged_validation_accuracy_keeps_its_signal() -> None:
    model, opt, x, y = make_task()

    def run() -> None:
        for _ in range(2):
            train_step(model, opt, x, y)
            with torch.no_grad():
                F.cross_entropy(model(x), y)
            traindoc.log(val_acc=0.123)

    _, scalars = watched(run)
    assert [v for _, v in values(scalars, "val_acc")] == [0.123, 0.123]
    assert values(scalars, "val_classes") == [(1, 4.0), (2, 4.0)]


def test_training_is_bit_identical_and_the_rng_untouched() -> None:
    def run_once() -> tuple[list[torch.Tensor], torch.Tensor]:
        model, opt, x, y = make_task()
        for _ in range(3):
            train_step(model, opt, x, y)
            model.eval()
            with torch.no_grad():
                F.cross_entropy(model(x), y)
            F.binary_cross_entropy_with_logits(model(x)[:, 0], (y > 1).float()).item()
            print(f"val_acc {0.25:.3f}")
        return [p.detach().clone() for p in model.parameters()], torch.rand(3)

    bare = run_once()
    out: list[Any] = []
    watched(lambda: out.append(run_once()))
    (params, after) = out[0]
    assert all(torch.equal(a, b) for a, b in zip(bare[0], params))
    assert torch.equal(bare[1], after)


def test_a_failing_measurement_disables_the_probe_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(eval_metrics, "_class_stats", boom)
    model, opt, x, y = make_task()

    def run() -> None:
        for _ in range(2):
            train_step(model, opt, x, y)
            with torch.no_grad():
                out = F.cross_entropy(model(x), y)  # the user's call still returns its loss
            assert out.ndim == 0
            print("epoch 1 val_acc 0.5")

    doc, scalars = watched(run)
    assert "eval_metrics" in doc.session.failed
    assert "stdout" not in doc.session.failed
    assert values(scalars, "val_acc") == [(1, 0.5), (2, 0.5)]


# ---- stdout ------------------------------------------------------------------------------------
class Sink(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stdout_is_unchanged_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = Sink()
    monkeypatch.setattr(sys, "stdout", sink)
    model, opt, x, y = make_task()
    text = "epoch 0 val_acc: 0.25\r50%|##   | 1/2 [acc=0.3]\rdone\nno digits here\npartial "

    def run() -> None:
        train_step(model, opt, x, y)
        assert sys.stdout is not sink and sys.stdout.isatty()
        print(text, end="")
        print("line", 2, sep="\t", flush=True)
        sys.stdout.writelines(["a=1\n", "b"])

    _, scalars = watched(run)
    assert sys.stdout is sink
    assert sink.getvalue() == text + "line\t2\n" + "a=1\nb"


def test_stdout_values_count_once_per_step_and_threads_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    model, opt, x, y = make_task()

    def run() -> None:
        train_step(model, opt, x, y)
        for i in range(5):  # a progress bar's refreshes
            print(f"\rval {i}/5 acc={0.1 * i:.1f}", end="")
        print()
        worker = threading.Thread(target=lambda: print("val_acc 0.99"))
        worker.start()
        worker.join()
        train_step(model, opt, x, y)
        print("Val Acc: 30%")

    _, scalars = watched(run)
    assert values(scalars, "val_acc") == [(1, pytest.approx(0.4)), (2, pytest.approx(0.3))]


def test_a_failing_reader_never_changes_the_output(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = io.StringIO()
    monkeypatch.setattr(sys, "stdout", sink)

    def boom(*args: Any, **kwargs: Any) -> dict[str, float]:
        raise ValueError("boom")

    monkeypatch.setattr(printed, "parse_line", boom)
    model, opt, x, y = make_task()

    def run() -> None:
        train_step(model, opt, x, y)
        print("val_acc 0.5")
        print("val_acc 0.6")

    doc, _ = watched(run)
    assert "stdout" in doc.session.failed
    assert sink.getvalue() == "val_acc 0.5\nval_acc 0.6\n"


def test_regions_without_a_loss_call_let_the_mode_go_and_evaluation_batches_keep_it() -> None:
    """An RL agent acting one step per no_grad region calls no loss: after 8 such regions in a
    row from one line, that line's regions run without the op-level mode, but every 64th
    (CleanRL's PPO rollout had 75 ops per region run through it). An evaluation with a region
    per batch calls its loss in each, and all 24 batches count."""
    model, opt, x, y = make_task(n=24 * 4)
    held: list[bool] = []
    expected: list[float] = []

    def run(ops: Any) -> None:
        for acting in (20, 50):
            train_step(model, opt, x, y)
            model.eval()
            for t in range(acting):  # one observation a region, no loss
                with torch.no_grad():
                    model(x[t:t + 1]).argmax(1)
                    held.append(ops.held("eval"))
            train_step(model, opt, x, y)
            logits_all = []
            for i in range(0, 24 * 4, 4):  # evaluating: a region per batch, a loss in each
                with torch.no_grad():
                    logits = model(x[i:i + 4])
                    F.cross_entropy(logits, y[i:i + 4])
                logits_all.append(logits)
            expected.append((torch.cat(logits_all).argmax(1) == y).float().mean().item())

    events: list[Any] = []
    with traindoc.watch(announce=False) as doc:
        doc.session.event_listeners.append(events.append)
        run(doc._probes.patcher.ops)
    assert held == [True] * 8 + [False] * 56 + [True] + [False] * 5  # the 65th checks again
    scalars = [e for e in events if isinstance(e, Scalar)]
    assert [v for _, v in values(scalars, "val_acc")] == pytest.approx(expected)


def test_eval_mode_windows_without_a_loss_let_the_mode_go_per_line() -> None:
    """An agent put in eval mode to act each step (Stable-Baselines3's set_training_mode(False)
    before every rollout), with gradients on, calls no loss: after 8 such windows from that
    line, its windows run without the op-level mode but every 64th. An evaluation in eval mode
    from another line, with its losses, is seen every time, between them."""
    model, opt, x, y = make_task()
    held: list[bool] = []
    expected: list[float] = []

    def act() -> None:  # one line switches to eval mode for acting
        model.eval()

    def run(ops: Any) -> None:
        for step in range(80):
            train_step(model, opt, x, y)
            act()
            model(x[:1]).argmax(1)  # acting with gradients on: the window of the eval mode
            held.append(ops.held("eval-mode"))
            if step % 20 == 19:  # an evaluation with gradients on, from another line
                model.eval()
                logits = model(x)
                F.cross_entropy(logits, y).item()
                expected.append((logits.argmax(1) == y).float().mean().item())

    events: list[Any] = []
    with traindoc.watch(announce=False) as doc:
        doc.session.event_listeners.append(events.append)
        run(doc._probes.patcher.ops)
    assert held[:8] == [True] * 8 and sum(held[8:]) == 1  # one recheck in the 72 windows after
    scalars = [e for e in events if isinstance(e, Scalar)]
    assert [v for _, v in values(scalars, "val_acc")] == pytest.approx(expected)
