"""Which curves show a finding's evidence, and where its threshold lies on them.

A finding rests on the signals its detector reads (``needs``, then ``uses``); the curve of each
signal is in ``Report.series``. A threshold is drawn only where the finding's own evidence
gives it in the curve's units (a loss spike: the moving average times the factor); a threshold
that is a share or a rate of something else is left to the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from traindoc.curves import DERIVED, GRAD_SCALE, STEPS_PER_S, UNCHANGED_SHARE, UPDATE_RATIO
from traindoc.engine import Report
from traindoc.events import SIGNALS
from traindoc.findings import EvidenceValue, Finding

MAX_PLOTS = 2  # per finding
# The run overview: the curves a reader looks at first, in this order, where the run has them.
OVERVIEW = ("loss", "lr", "grad_norm", STEPS_PER_S, UPDATE_RATIO, GRAD_SCALE)
# Signals that are not curves themselves, and the curves that show them.
_CURVES_OF: dict[str, tuple[str, ...]] = {
    "params": (UPDATE_RATIO,),
    "clip": ("grad_norm",),
    "amp": (GRAD_SCALE,),
    "classification": ("loss",),
    "backward": ("loss",),
    "data_wait": (STEPS_PER_S,),
    "optimizer": ("lr",),
    "load": ("lr",),
    "scheduler": ("lr",),
}
# Where one finding's evidence is better shown by other curves than its detector's signals.
_PREFERRED: dict[str, tuple[str, ...]] = {
    "update-underflow": (UNCHANGED_SHARE, UPDATE_RATIO),
    "nonfinite": ("loss", "grad_norm"),
    "nan-hidden-by-logging": ("loss", "grad_norm"),
    "train-val-divergence": ("loss", "val_loss"),
    "tiny-updates": (UPDATE_RATIO, "loss"),
}


def _num(value: EvidenceValue | None) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


Level = Callable[[Mapping[str, EvidenceValue], str], "float | None"]  # (evidence, curve) -> level


def _product(a: str, b: str) -> Level:
    def level(ev: Mapping[str, EvidenceValue], curve: str) -> float | None:
        x = ev.get(a)
        if isinstance(x, dict):  # per-metric evidence: {metric: value}
            x = x.get(curve)
        nx, ny = _num(x), _num(ev.get(b))
        return nx * ny if nx is not None and ny is not None else None
    return level


def _key(a: str) -> Level:
    return lambda ev, curve: _num(ev.get(a))


# id -> (curve, or "" for any curve the finding names; the threshold's level in that curve's
# units, from the finding's evidence)
_THRESHOLDS: dict[str, tuple[str, Level]] = {
    "loss-spike": ("loss", _product("moving_average", "threshold")),
    "divergence": ("loss", _product("best", "threshold")),
    "exploding-gradients": ("grad_norm", _product("reference_value", "threshold")),
    "clipping-every-step": ("grad_norm", _key("max_norm")),
    "bad-initial-loss": ("loss", _key("threshold")),
    "tiny-updates": (UPDATE_RATIO, _key("floor")),
    "val-at-chance": ("val_acc", _key("chance")),
    "grad-scaler-collapse": (GRAD_SCALE, _key("min_scale")),
    "expert-collapse": ("expert_gini", _key("threshold")),
    "metric-divergence": ("", _product("best", "threshold")),
}


@dataclass(frozen=True)
class Plot:
    """One curve to draw for a finding: its name in ``Report.series``, a label, the threshold
    level (None: none drawn) and the step to mark (the finding's trigger step)."""

    series: str
    label: str
    threshold: float | None
    trigger: int | None


def label(name: str) -> str:
    """A curve's label: the signal's name and, for a known one, what it measures."""
    what = DERIVED.get(name) or SIGNALS.get(name)
    return f"{name}: {what}" if what else name


def for_finding(finding: Finding, report: Report) -> list[Plot]:
    """The curves of ``report`` that show ``finding``'s evidence (at most MAX_PLOTS); the loss as
    context when none of its own signals is a curve; empty when the run has no curve at all."""
    names = [n for n in _candidates(finding) if n in report.series and report.series[n].points]
    if not names and "loss" in report.series:
        names = ["loss"]
    plots = []
    for name in list(dict.fromkeys(names))[:MAX_PLOTS]:
        level = None
        rule = _THRESHOLDS.get(finding.id)
        if rule is not None and rule[0] in (name, ""):
            level = rule[1](finding.evidence, name)
        plots.append(Plot(series=name, label=label(name), threshold=level, trigger=finding.step))
    return plots


def _candidates(finding: Finding) -> list[str]:
    from traindoc import detectors

    out = list(_PREFERRED.get(finding.id, ()))
    if finding.id == "metric-divergence":  # the metrics it names are the curves
        metrics = finding.evidence.get("metrics")
        out += [m for m in metrics if isinstance(m, str)] if isinstance(metrics, list) else []
    cls = next((c for c in detectors.DETECTORS if c.id == finding.id), None)
    if cls is not None:
        # needs and uses are sets: sorted, so a report renders alike in any process (hash seed).
        for signal in (*sorted(cls.needs), *sorted(cls.uses)):
            out += _CURVES_OF.get(signal, (signal,))
    return out


def param_rows(finding: Finding, report: Report, limit: int = 12) -> Sequence[tuple[str, Mapping[str, object]]]:
    """The per-tensor measurements of the parameters ``finding`` names (its ``where``)."""
    return [(name, report.params[name]) for name in finding.where if name in report.params][:limit]
