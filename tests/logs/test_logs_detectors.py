"""The detectors written for logs: the edges their examples do not show (false alarms that must
stay quiet, units, config validation). Their examples run in tests/test_examples.py."""

from __future__ import annotations

import math

import pytest

from traindoc import detectors
from traindoc.analyze import analyze
from traindoc.detectors.scheduler_before_optimizer import cosine_offset
from traindoc.detectors.train_val_divergence import theil_sen
from traindoc.events import RunEnd, RunStart, Scalar

MINE = ["nan-hidden-by-logging", "metric-divergence", "metric-out-of-range", "train-val-divergence",
        "val-at-chance", "degenerate-threshold", "scheduler-before-optimizer", "expert-collapse"]


def fired(points: list[tuple[int, str, float]], id_: str, **config: object) -> dict[str, int | None]:
    events = [RunStart(source="logs"), *(Scalar(s, n, v) for s, n, v in points), RunEnd(steps=1)]
    report = analyze(events, select=[id_], settings=_settings({id_: config}) if config else None)
    assert not report.disabled, report.disabled
    return {f.id: f.step for f in report.findings}


def _settings(det: dict[str, dict[str, object]]):  # type: ignore[no-untyped-def]
    from traindoc.config import Settings

    return Settings(detectors=det)


# ------------------------------------------------------------------ scheduler-before-optimizer
def onecycle(prestep: bool, steps: int, total: int, pct: float, anneal: str = "cos",
             max_lr: float = 0.8, div: float = 25.0, final_div: float = 1e4) -> list[float]:
    """torch.optim.lr_scheduler.OneCycleLR's LR at each step (its formula, without importing
    torch: test_onecycle_replica checks it against the torch-made golden streams)."""
    start, low = max_lr / div, max_lr / div / final_div
    peak_at, end_at = pct * total - 1, total - 1

    def anneal_(a: float, b: float, f: float) -> float:
        return b + (a - b) / 2 * (math.cos(math.pi * f) + 1) if anneal == "cos" else (b - a) * f + a

    out = []
    for k in range(steps):
        t = k + 1 if prestep else k
        out.append(anneal_(start, max_lr, t / peak_at) if t <= peak_at
                   else anneal_(max_lr, low, (t - peak_at) / (end_at - peak_at)))
    return out


def test_onecycle_replica() -> None:
    import json
    from pathlib import Path

    golden = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "golden"
    for name, pre in (("onecycle_prestepped", True), ("onecycle_correct", False)):
        lines = [json.loads(x) for x in (golden / f"{name}.jsonl").read_text().splitlines()]
        torch_lrs = [x["value"] for x in lines if x["kind"] == "scalar"]
        total = 31 if pre else 30
        assert onecycle(pre, 30, total, 9 / total) == pytest.approx(torch_lrs, rel=1e-12)


def test_cosine_offset_recovers_the_phase() -> None:
    lrs = [0.416 - 0.384 * math.cos(math.pi * (k + 1) / 8) for k in range(8)]
    s, a, b, w, resid = cosine_offset(lrs)  # type: ignore[misc]
    assert s == pytest.approx(1.0) and a - b == pytest.approx(0.032) and a + b == pytest.approx(0.8)
    assert w == pytest.approx(math.pi / 8) and resid < 1e-9
    assert cosine_offset([0.1 * k + 0.1 for k in range(10)]) is None  # linear
    assert cosine_offset([0.01 * (k + 1) ** 2 for k in range(10)]) is None  # quadratic
    assert cosine_offset([0.001 * 1.5 ** k for k in range(10)]) is None  # exponential


@pytest.mark.parametrize("case,fires", [
    ("per-epoch OneCycle, pre-stepped", True),
    ("per-epoch OneCycle, correct", False),
    ("per-epoch OneCycle linear anneal, pre-stepped", False),  # indistinguishable from a linear ramp
    ("per-batch OneCycle over 3000 warmup steps, pre-stepped", False),  # offset negligible
    ("cosine warmup from 0 starting one step in", False),  # often deliberate: lr(0) = 0 avoided
    ("log that starts mid-run", False),
])
def test_warmup_schedules(case: str, fires: bool) -> None:
    if case == "per-epoch OneCycle, pre-stepped":
        lrs = onecycle(True, 30, 31, 9 / 31)
    elif case == "per-epoch OneCycle, correct":
        lrs = onecycle(False, 30, 30, 9 / 30)
    elif case == "per-epoch OneCycle linear anneal, pre-stepped":
        lrs = onecycle(True, 30, 31, 9 / 31, "linear")
    elif case == "per-batch OneCycle over 3000 warmup steps, pre-stepped":
        lrs = onecycle(True, 4000, 10001, 0.3)
    elif case == "cosine warmup from 0 starting one step in":
        lrs = [0.5 * 3e-4 * (1 - math.cos(math.pi * min(k + 1, 20) / 20)) for k in range(60)]
    else:
        lrs = onecycle(True, 30, 31, 9 / 31)[3:]
    got = fired([(k, "lr", v) for k, v in enumerate(lrs)], "scheduler-before-optimizer")
    assert ("scheduler-before-optimizer" in got) is fires, case


def test_scheduler_needs_a_constant_interval() -> None:
    lrs = onecycle(True, 30, 31, 9 / 31)
    steps = [0, 1, 2, 4, 5, 6, 7, 8, 9, 10]  # a gap: the indices are not schedule steps
    assert fired([(s, "lr", lrs[i]) for i, s in enumerate(steps)], "scheduler-before-optimizer") == {}


# ------------------------------------------------------------------------------ val-at-chance
def test_val_at_chance_with_num_classes_and_percent() -> None:
    pts = [(e, n, v) for e in range(6) for n, v in (("train_acc", 20.0 + 8 * e), ("val_acc", 10.2))]
    assert fired(pts, "val-at-chance", classes=10) == {"val-at-chance": 2}
    assert fired(pts, "val-at-chance", classes=100) == {}  # 10% is not chance for 100 classes


def test_val_at_chance_quiet_while_train_is_at_chance_too() -> None:
    pts = [(e, n, 0.1) for e in range(8) for n in ("train_acc", "val_acc")]
    assert fired(pts, "val-at-chance", classes=10) == {}


def test_val_at_chance_uses_the_loss_when_train_acc_is_not_logged() -> None:
    pts = [(s, "loss", 2.3 * math.exp(-s / 30)) for s in range(100)]
    pts += [(s, "val_acc", 0.5) for s in range(9, 100, 10)]
    assert fired(pts, "val-at-chance", classes=2) == {"val-at-chance": 29}
    flat = [(s, "loss", 0.69) for s in range(100)] + [(s, "val_acc", 0.5) for s in range(9, 100, 10)]
    assert fired(flat, "val-at-chance", classes=2) == {}


# ----------------------------------------------------------------------- degenerate-threshold
def test_f1_zero_at_every_evaluation_while_the_loss_falls_fires() -> None:
    pts = [(e, "loss", 2.0 * math.exp(-e / 4)) for e in range(10)] + [(e, "val_f1", 0.0) for e in range(10)]
    assert fired(pts, "degenerate-threshold") == {"degenerate-threshold": 0}


def test_f1_zero_for_the_first_evaluations_then_rising_is_quiet() -> None:
    pts = [(e, "loss", 2.0 * math.exp(-e / 4)) for e in range(10)]
    pts += [(e, "val_f1", 0.0 if e < 2 else 0.1 * e) for e in range(10)]
    assert fired(pts, "degenerate-threshold") == {}


def test_f1_zero_at_too_few_evaluations_is_quiet() -> None:
    pts = [(e, "loss", 2.0 * math.exp(-e / 4)) for e in range(4)] + [(e, "val_f1", 0.0) for e in range(4)]
    assert fired(pts, "degenerate-threshold") == {}


def test_f1_zero_while_the_loss_is_flat_is_not_a_threshold_problem() -> None:
    pts = [(e, "loss", 1.0) for e in range(10)]
    pts += [(e, "val_f1", 0.3 if e < 5 else 0.0) for e in range(10)]
    assert fired(pts, "degenerate-threshold") == {}


def test_f1_nan_with_precision_nan() -> None:
    pts = [(e, "loss", 2.0 * math.exp(-e / 4)) for e in range(10)]
    pts += [(e, "val_f1", 0.4 if e < 6 else math.nan) for e in range(10)]
    pts += [(e, "metric.val_precision", 0.5 if e < 6 else math.nan) for e in range(10)]
    events = [RunStart(source="logs"), *(Scalar(s, n, v) for s, n, v in pts), RunEnd(steps=10)]
    (f,) = analyze(events, select=["degenerate-threshold"]).findings
    assert f.step == 6 and "precision NaN (0/0) at 4" in f.message


# --------------------------------------------------------------------------- expert-collapse
def test_one_high_gini_value_is_not_a_collapse() -> None:
    pts = [(e, "expert_gini", 0.9 if e == 5 else 0.35) for e in range(20)]
    assert fired(pts, "expert-collapse") == {}


# ---------------------------------------------------------------------- train-val-divergence
def test_theil_sen_ignores_one_outlier() -> None:
    assert theil_sen([0, 1, 2, 3, 4], [0, 1, 2, 100, 4]) == pytest.approx(1.0)


def test_val_rising_while_train_rises_too_is_not_overfitting() -> None:
    pts = []
    for s in range(0, 3000, 10):
        pts.append((s, "loss", 1.0 + s / 3000))
        if s % 300 == 0:
            pts.append((s, "val_loss", 1.2 + s / 2000))
    assert fired(pts, "train-val-divergence") == {}


def _val_run(seed: int, noise: float, rise: float) -> list[tuple[int, str, float]]:
    import random

    rng = random.Random(seed)
    pts: list[tuple[int, str, float]] = []
    for s in range(0, 20000, 20):
        pts.append((s, "loss", 2.0 * math.exp(-s / 5000) + 0.3 + rng.gauss(0, 0.02)))
        if s % 500 == 0:
            pts.append((s, "val_loss", 0.8 + rise * s / 20000 + rng.gauss(0, noise)))
    return pts


def test_false_alarm_rate_on_noisy_flat_validation() -> None:
    """Flat validation with 4% noise, 40 evaluations, training loss falling: the minimum of the
    noise and a trend fitted from it used to fire on 1 run in 3."""
    alarms = sum(bool(fired(_val_run(seed, 0.03, 0.0), "train-val-divergence")) for seed in range(40))
    hits = sum(bool(fired(_val_run(seed, 0.03, 0.3), "train-val-divergence")) for seed in range(10))
    assert alarms == 0 and hits == 10


# --------------------------------------------------------------------------- nan-hidden, etc.
def test_nonfinite_loss_in_plain_sight_is_not_hidden() -> None:
    pts = [(s, n, math.nan) for s in range(10) for n in ("loss", "grad_norm")]
    assert fired(pts, "nan-hidden-by-logging") == {}


def test_metric_divergence_reads_error_metrics_by_name_and_watches_what_it_is_told() -> None:
    rise = [7.0 * math.exp(-e / 20) if e < 30 else 40.0 + e for e in range(50)]
    assert fired([(e, "metric.train_mae", v) for e, v in enumerate(rise)], "metric-divergence") == {
        "metric-divergence": 32}  # an error by its name, as a log column or a live script's metric
    chamfer = [(e, "metric.val_chamfer", v) for e, v in enumerate(rise)]
    assert fired(chamfer, "metric-divergence") == {}  # a name that says nothing: not judged ...
    assert fired(chamfer, "metric-divergence", watch=("metric.val_chamfer",)) == {"metric-divergence": 32}
    score = [(e, "metric.val_auc", v) for e, v in enumerate(rise)]
    assert fired(score, "metric-divergence") == {}  # ... nor a score, where higher is better


@pytest.mark.parametrize("loss_falls", [True, False])
def test_metric_divergence_says_whether_the_training_loss_fell_meanwhile(loss_falls: bool) -> None:
    """A metric that explodes while the training loss falls is fitted noise; while it rises too,
    the run is unstable: the finding tells them apart."""
    rise = [7.0 * math.exp(-e / 20) if e < 30 else 40.0 + e for e in range(50)]
    loss = [2.0 * math.exp(-e / 10) if loss_falls else 1.0 + (e / 10 if e >= 30 else 0.0) for e in range(50)]
    points = [(e, n, v) for e in range(50) for n, v in (("loss", loss[e]), ("metric.val_mae", rise[e]))]
    events = [RunStart(source="logs"), *(Scalar(s, n, v) for s, n, v in points), RunEnd(steps=50)]
    (f,) = analyze(events, select=["metric-divergence"]).findings
    assert "meanwhile the training loss went from" in f.message
    assert ("fits its training data" in f.message) is loss_falls
    assert f.fix.split(": ", 1)[1].startswith("a model that fits noise") is loss_falls


def test_metric_divergence_quiet_near_zero_after_converging() -> None:
    pts = [(e, "metric.val_mae", max(0.001, 5 * math.exp(-e / 3)) * (3 if e % 7 == 0 else 1)) for e in range(60)]
    assert fired(pts, "metric-divergence", watch=("metric.val_mae",)) == {}


def test_a_router_gini_or_entropy_under_the_scripts_own_name_is_bounded_too() -> None:
    for name in ("metric.moe_gini", "metric.expert_gini", "metric.router_entropy"):
        assert fired([(e, name, -0.5) for e in range(5)], "metric-out-of-range") == {"metric-out-of-range": 0}
    # a credit model's normalized Gini (2 AUC - 1) and a policy's differential entropy may be < 0
    for name in ("metric.val_gini", "metric.policy_entropy"):
        assert fired([(e, name, -0.5) for e in range(5)], "metric-out-of-range") == {}


def test_gini_at_the_bounds_within_rounding_is_fine() -> None:
    pts = [(e, "expert_gini", v) for e, v in enumerate([0.0, -1e-9, 1.0, 1 + 1e-9, 0.3])]
    assert fired(pts, "metric-out-of-range") == {}


@pytest.mark.parametrize("id_,bad", [
    ("val-at-chance", {"classes": 1}), ("val-at-chance", {"min_evals": 1}),
    ("degenerate-threshold", {"min_zeros": 0}), ("expert-collapse", {"gini": 1.5}),
    ("train-val-divergence", {"window": 2}), ("scheduler-before-optimizer", {"min_ratio": 1.0}),
    ("nan-hidden-by-logging", {"consecutive": 0}), ("metric-divergence", {"factor": 1.0}),
    ("metric-out-of-range", {"tolerance": -1.0}),
])
def test_config_is_validated(id_: str, bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        detectors.build(select=[id_], config={id_: bad})


@pytest.mark.parametrize("id_", MINE)
def test_registered_with_a_catalog_entry(id_: str) -> None:
    from traindoc import catalog

    assert id_ in detectors.by_id()
    assert "logs" in catalog.get(id_).sources or id_ == "scheduler-before-optimizer"
